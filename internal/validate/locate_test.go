package validate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/runstate"
)

// TestOwnerRecordsServing: a worker serving HTTP records its addresses
// and token file in its owner record, with its start time; the next
// owner starts without them (it may serve stdio).
func TestOwnerRecordsServing(t *testing.T) {
	state := t.TempDir()
	owner, err := OpenOwner(state, "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.SetServing([]string{"127.0.0.1:18120"}, "/srv/tok"); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadOwnerRecord(state, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if rec.PID != os.Getpid() || rec.ProcStart == 0 || !rec.Alive() {
		t.Errorf("record %+v: want this process, alive", rec)
	}
	if len(rec.Listen) != 1 || rec.Listen[0] != "127.0.0.1:18120" || rec.TokenFile != "/srv/tok" {
		t.Errorf("record %+v: want Listen 127.0.0.1:18120 and TokenFile /srv/tok", rec)
	}
	owner.Close()
	owner, err = OpenOwner(state, "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if rec, err := ReadOwnerRecord(state, "fake"); err != nil || len(rec.Listen) != 0 || rec.TokenFile != "" {
		t.Errorf("a new owner's record %+v, %v: kept its predecessor's listener", rec, err)
	}
}

// TestLocate: a running worker's record wins, else KIND.conf's Listen=
// with the default token file; a stale or corrupt record, one of a worker
// on stdio, and a missing KIND.conf are not errors.
func TestLocate(t *testing.T) {
	conf, state := t.TempDir(), t.TempDir()
	kindConf := func(listen string) string {
		s := "[Validator]\nExecStart=/usr/bin/shellcheck %FILES%\nFiles=*.sh\n"
		if listen != "" {
			s += "[Listener]\nListen=" + listen + "\n"
		}
		return s
	}
	start, err := runstate.ProcStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	record := func(kind string, r OwnerRecord) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(state, kind), 0o700); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r)
		if err := os.WriteFile(OwnerRecordPath(state, kind), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write := func(kind, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(conf, kind+".conf"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("configured", kindConf("127.0.0.1:18120"))
	write("running", kindConf("127.0.0.1:18121"))
	record("running", OwnerRecord{Kind: "running", PID: os.Getpid(), ProcStart: start, Listen: []string{"127.0.0.1:40001"}, TokenFile: "/srv/running.token"})
	write("stale", kindConf("127.0.0.1:18122"))
	record("stale", OwnerRecord{Kind: "stale", PID: os.Getpid(), ProcStart: start + 1, Listen: []string{"127.0.0.1:40002"}, TokenFile: "/srv/stale.token"})
	write("stdio", kindConf(""))
	record("stdio", OwnerRecord{Kind: "stdio", PID: os.Getpid(), ProcStart: start})
	write("corrupt", kindConf("127.0.0.1:18123"))
	record("corrupt", OwnerRecord{})
	if err := os.WriteFile(OwnerRecordPath(state, "corrupt"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	write("broken", "[Validator]\nFiles=*.sh\n")
	record("adhoc", OwnerRecord{Kind: "adhoc", PID: os.Getpid(), ProcStart: start, Listen: []string{"127.0.0.1:40003"}})

	tests := []struct {
		kind           string
		wantListen     string
		wantToken      string // "" for TokenPath
		wantOwner      bool
		wantConfigured bool
		wantFrom       string
		wantErr        string
	}{
		{kind: "configured", wantListen: "127.0.0.1:18120", wantConfigured: true, wantFrom: "Listen= of " + filepath.Join(conf, "configured.conf")},
		{kind: "running", wantListen: "127.0.0.1:40001", wantToken: "/srv/running.token", wantOwner: true, wantFrom: "the running soda-validated running (pid"},
		{kind: "stale", wantListen: "127.0.0.1:18122", wantConfigured: true},
		{kind: "stdio", wantListen: "", wantConfigured: true},
		{kind: "corrupt", wantListen: "127.0.0.1:18123", wantConfigured: true},
		{kind: "adhoc", wantListen: "127.0.0.1:40003", wantOwner: true},
		{kind: "none", wantListen: ""},
		{kind: "broken", wantErr: "broken.conf"},
		{kind: "../etc", wantErr: "validator kind"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			e, err := Locate(conf, state, tt.kind)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Locate: %+v, %v; want an error naming %q", e, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantToken := tt.wantToken
			if wantToken == "" {
				wantToken = filepath.Join(state, tt.kind, "token")
			}
			if e.Listen != tt.wantListen || e.TokenFile != wantToken || (e.Owner != nil) != tt.wantOwner || e.Configured != tt.wantConfigured {
				t.Errorf("Locate = %+v; want Listen %q, TokenFile %q, owner %v, configured %v", e, tt.wantListen, wantToken, tt.wantOwner, tt.wantConfigured)
			}
			if !strings.Contains(e.From(), tt.wantFrom) {
				t.Errorf("From() = %q, want %q", e.From(), tt.wantFrom)
			}
		})
	}
}
