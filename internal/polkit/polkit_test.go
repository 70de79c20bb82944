package polkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/dbustest"
)

// privateBus starts a dbus-daemon of its own (a session bus config in a
// temporary directory) and returns its address; the host's buses are not
// touched.
func privateBus(t *testing.T) string {
	t.Helper()
	return dbustest.PrivateBus(t)
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the private bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// fakeAuthority plays polkitd on the private bus: it records each
// question and answers from answer.
type fakeAuthority struct {
	mu        sync.Mutex
	got       []call
	cancelled []string
	answer    result
	block     chan struct{} // when set, CheckAuthorization waits for it
}

type call struct {
	subj    subject
	action  string
	details map[string]string
	flags   uint32
	cancel  string
}

func (f *fakeAuthority) CheckAuthorization(subj subject, action string, details map[string]string, flags uint32, cancel string) (result, *dbus.Error) {
	f.mu.Lock()
	f.got = append(f.got, call{subj, action, details, flags, cancel})
	block, answer := f.block, f.answer
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	if action == "fail" {
		return result{}, dbus.NewError("org.freedesktop.PolicyKit1.Error.Failed", []any{"Action fail is not registered"})
	}
	return answer, nil
}

func (f *fakeAuthority) CancelCheckAuthorization(id string) *dbus.Error {
	f.mu.Lock()
	f.cancelled = append(f.cancelled, id)
	f.mu.Unlock()
	return nil
}

func startFake(t *testing.T, addr string, f *fakeAuthority) {
	t.Helper()
	conn := connect(t, addr)
	if err := conn.Export(f, ObjectPath, Interface); err != nil {
		t.Fatal(err)
	}
	if r, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s on the private bus: %v %v", BusName, r, err)
	}
}

func TestCheckAuthorization(t *testing.T) {
	addr := privateBus(t)
	caller := connect(t, addr) // the daemon's caller: its unique name is the subject
	tests := []struct {
		name      string
		check     Check
		answer    result
		want      Result
		wantFlags uint32
		wantErr   string
	}{
		{
			name:      "authorized, details passed",
			check:     Check{Action: "io.example.create", Details: map[string]string{"profile": "dev"}},
			answer:    result{IsAuthorized: true, Details: map[string]string{}},
			want:      Result{Authorized: true, Details: map[string]string{}},
			wantFlags: 0,
		},
		{
			name:      "challenge, interactive flag passed through",
			check:     Check{Action: "io.example.beyond", Interactive: true},
			answer:    result{IsChallenge: true, Details: map[string]string{"polkit.dismissed": "true"}},
			want:      Result{Challenge: true, Details: map[string]string{"polkit.dismissed": "true"}},
			wantFlags: 1,
		},
		{name: "polkit error wrapped", check: Check{Action: "fail"}, wantErr: "polkit: check fail for :"},
		{name: "no action", check: Check{}, wantErr: "no action id"},
		{name: "reserved detail", check: Check{Action: "a", Details: map[string]string{"polkit.message": "x"}}, wantErr: "polkit's own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeAuthority{answer: tt.answer}
			startFake(t, addr, f)
			tt.check.Sender = caller.Names()[0]
			daemon := connect(t, addr)
			got, err := New(daemon).CheckAuthorization(context.Background(), tt.check)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CheckAuthorization: error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckAuthorization: %v", err)
			}
			if got.Authorized != tt.want.Authorized || got.Challenge != tt.want.Challenge || len(got.Details) != len(tt.want.Details) {
				t.Fatalf("CheckAuthorization = %+v, want %+v", got, tt.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.got) != 1 {
				t.Fatalf("polkit got %d questions, want 1", len(f.got))
			}
			c := f.got[0]
			if c.subj.Kind != "system-bus-name" || c.subj.Details["name"].Value() != caller.Names()[0] || len(c.subj.Details) != 1 {
				t.Errorf("subject = %+v, want system-bus-name of %s", c.subj, caller.Names()[0])
			}
			if c.action != tt.check.Action || c.flags != tt.wantFlags || !strings.HasPrefix(c.cancel, "soda-") {
				t.Errorf("question = %+v", c)
			}
			if tt.check.Details != nil && c.details["profile"] != tt.check.Details["profile"] {
				t.Errorf("details = %v, want %v", c.details, tt.check.Details)
			}
		})
	}
}

func TestCheckAuthorizationSenderFromBus(t *testing.T) {
	for _, s := range []string{"", "org.example.Name", "1.2"} {
		_, err := New(nil).CheckAuthorization(context.Background(), Check{Sender: s, Action: "a"})
		if err == nil || !strings.Contains(err.Error(), "not a unique bus name") {
			t.Errorf("sender %q: error %v, want a refusal before any bus call", s, err)
		}
	}
}

// TestCheckAuthorizationCancel: a check whose context ends is cancelled in
// polkitd too, with the id it was asked with.
func TestCheckAuthorizationCancel(t *testing.T) {
	addr := privateBus(t)
	f := &fakeAuthority{block: make(chan struct{})}
	startFake(t, addr, f)
	defer close(f.block)
	daemon := connect(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := New(daemon).CheckAuthorization(ctx, Check{Sender: daemon.Names()[0], Action: "slow", Interactive: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CheckAuthorization: error %v, want the context's deadline", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 1 || len(f.cancelled) != 1 || f.cancelled[0] != f.got[0].cancel {
		t.Fatalf("asked %+v, cancelled %v: want the check's own id cancelled", f.got, f.cancelled)
	}
}

// The interface is what the daemon holds.
var _ Authorizer = (*Client)(nil)
