package sodad

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/polkit"
	"github.com/soda-project/soda/internal/sodadapi"
)

// TestBusErrorTable: every kind becomes its D-Bus name, with the message
// as it was made; an error of no kind is Failed.
func TestBusErrorTable(t *testing.T) {
	for _, tc := range []struct {
		kind error
		name string
	}{
		{errNoSuchProfile, sodadapi.ErrorNoSuchProfile},
		{errNoSuchSandbox, sodadapi.ErrorNoSuchSandbox},
		{errExceedsProfile, sodadapi.ErrorExceedsProfile},
		{errInvalidSpec, sodadapi.ErrorInvalidSpec},
		{errInvalidTarget, sodadapi.ErrorInvalidTarget},
		{errInvalidFd, sodadapi.ErrorInvalidFd},
		{errNotRunning, sodadapi.ErrorNotRunning},
		{errNotPersistent, sodadapi.ErrorNotPersistent},
		{errDraining, sodadapi.ErrorDraining},
		{errTooManySandboxes, sodadapi.ErrorTooManySandboxes},
		{errInteractiveAuth, sodadapi.ErrorInteractiveAuth},
		{errAccessDenied, sodadapi.ErrorAccessDenied},
		{errInvalidArgs, sodadapi.ErrorInvalidArgs},
		{errNotSupported, sodadapi.ErrorNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errorf(tc.kind, "sandbox %s: %d", "a", 7)
			if !errors.Is(err, tc.kind) {
				t.Errorf("errors.Is(%v, its kind) is false", err)
			}
			de := busError(err)
			if de.Name != tc.name || !slices.Equal(de.Body, []any{"sandbox a: 7"}) {
				t.Errorf("busError = %s %v, want %s [sandbox a: 7]", de.Name, de.Body, tc.name)
			}
			// Wrapped with context, it keeps its name and gains the
			// context in its message.
			de = busError(fmt.Errorf("Kill: %w", err))
			if de.Name != tc.name || de.Error() != "Kill: sandbox a: 7" {
				t.Errorf("wrapped: %s %q", de.Name, de.Error())
			}
		})
	}
	names := map[string]bool{}
	for _, n := range busNames {
		if names[n] {
			t.Errorf("%s: two kinds", n)
		}
		names[n] = true
	}
	if len(busNames) != 14 {
		t.Errorf("busNames has %d kinds, the test knows 14", len(busNames))
	}
}

func TestBusErrorKinds(t *testing.T) {
	if busError(nil) != nil {
		t.Errorf("busError(nil) is not nil")
	}
	cause := &fs.PathError{Op: "stat", Path: "/x", Err: fs.ErrNotExist}
	for _, tc := range []struct {
		name     string
		err      error
		wantName string
		wantMsg  string
	}{
		{"no kind is Failed", fmt.Errorf("start the sandbox: %w", cause), sodadapi.ErrorFailed, "start the sandbox: stat /x: file does not exist"},
		{"a kind wrapping a cause", errorf(errInvalidSpec, "Masks %s: %w", "/x", cause), sodadapi.ErrorInvalidSpec, "Masks /x: stat /x: file does not exist"},
		{"the outermost kind wins", errorf(errInvalidSpec, "MCP fs: %w", errorf(errAccessDenied, "inner")), sodadapi.ErrorInvalidSpec, "MCP fs: inner"},
		{"a D-Bus error is no kind", fmt.Errorf("polkit: %w", dbus.NewError(sodadapi.ErrorAccessDenied, []any{"no"})), sodadapi.ErrorFailed, "polkit: no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			de := busError(tc.err)
			if de.Name != tc.wantName || de.Error() != tc.wantMsg || len(de.Body) != 1 {
				t.Errorf("busError = %s %v, want %s %q", de.Name, de.Body, tc.wantName, tc.wantMsg)
			}
		})
	}
	if err := errorf(errInvalidSpec, "Masks %s: %w", "/x", cause); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is does not find the cause of %v", err)
	}
}

// fixedPeers says :1.11 is uid 1001 and every other sender uid 1000, or
// fails.
type fixedPeers struct{ err error }

func (p fixedPeers) Credentials(_ context.Context, sender string) (uint32, []uint32, error) {
	if sender == ":1.11" {
		return 1001, nil, p.err
	}
	return 1000, nil, p.err
}

// TestMethodErrors: the methods answer with the D-Bus error names and
// messages of their checks.
func TestMethodErrors(t *testing.T) {
	yes := polkit.Result{Authorized: true}
	d := &Daemon{peers: fixedPeers{}, boxes: map[string]*box{}, run: context.Background(),
		authz: authz{auth: &fakeAuth{answers: map[string]polkit.Result{":1.10 " + sodadapi.ActionKill: yes, ":1.10 " + sodadapi.ActionExec: yes}}}}
	b := &box{d: d, id: "a", owner: 1000, profile: "dev"}
	d.boxes["a"] = b
	m, sm := manager{d}, sandboxMethods{b}
	noOpts := map[string]dbus.Variant{}
	for _, tc := range []struct {
		name     string
		call     func() *dbus.Error
		wantName string
		wantMsg  string
	}{
		{"GetSandbox of none", func() *dbus.Error { _, e := m.GetSandbox(":1.10", "nope"); return e }, sodadapi.ErrorNoSuchSandbox, `no sandbox "nope"`},
		{"GetSandbox of another's", func() *dbus.Error { _, e := m.GetSandbox(":1.11", "a"); return e }, sodadapi.ErrorNoSuchSandbox, `no sandbox "a"`},
		{"Kill, bad signal", func() *dbus.Error { return sm.Kill(":1.10", 0, noOpts) }, sodadapi.ErrorInvalidArgs, "signal 0: want 1 to 64"},
		{"Kill, unknown option", func() *dbus.Error { return sm.Kill(":1.10", 9, map[string]dbus.Variant{"x": v(true)}) }, sodadapi.ErrorInvalidArgs, `unknown option "x"`},
		{"Kill, not running", func() *dbus.Error { return sm.Kill(":1.10", 9, noOpts) }, sodadapi.ErrorNotRunning, "sandbox a is not running"},
		{"Kill by another", func() *dbus.Error { return sm.Kill(":1.11", 9, noOpts) }, sodadapi.ErrorAccessDenied, "polkit refused " + sodadapi.ActionKillOther},
		{"Exec, not running", func() *dbus.Error { _, _, _, e := sm.Exec(":1.10", []string{"true"}, noOpts, noOpts); return e }, sodadapi.ErrorNotRunning, "sandbox a is not running"},
		{"ExecEx, empty argv", func() *dbus.Error { _, e := sm.ExecEx(":1.10", nil, noOpts, noOpts); return e }, sodadapi.ErrorInvalidArgs, "argv is empty: name the command to run"},
		{"Grant, bad target", func() *dbus.Error { return sm.Grant(":1.10", "mcp:", noOpts) }, sodadapi.ErrorInvalidTarget, `target "mcp:": no server name`},
		{"ReadAudit by another", func() *dbus.Error { _, _, e := sm.ReadAudit(":1.11", 0, 0, noOpts); return e }, sodadapi.ErrorAccessDenied, "polkit refused " + sodadapi.ActionReadAuditOther},
		{"CreateSandbox, bad spec", func() *dbus.Error {
			_, _, e := m.CreateSandbox(":1.10", "dev", []string{"true"}, map[string]dbus.Variant{"uid": v(uint32(0))}, noOpts, noOpts)
			return e
		}, sodadapi.ErrorInvalidArgs, `spec key "uid": the caller's identity comes from the bus, never from arguments`},
		{"CreateSandbox, fd not an fd", func() *dbus.Error {
			_, _, e := m.CreateSandbox(":1.10", "dev", []string{"true"}, noOpts, map[string]dbus.Variant{"stdin": v("x")}, noOpts)
			return e
		}, sodadapi.ErrorInvalidFd, "fd stdin: want a variant of type h (a Unix fd), got s"},
		{"who is calling fails", func() *dbus.Error {
			gone := &Daemon{peers: fixedPeers{err: errors.New("no such name")}, boxes: map[string]*box{}}
			_, e := manager{gone}.ListSandboxes(":1.10")
			return e
		}, sodadapi.ErrorFailed, "who is calling: no such name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.call()
			if e == nil || e.Name != tc.wantName || e.Error() != tc.wantMsg || len(e.Body) != 1 {
				t.Fatalf("error = %v, want %s %q", e, tc.wantName, tc.wantMsg)
			}
		})
	}
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	if _, _, e := m.CreateSandbox(":1.10", "dev", []string{"true"}, noOpts, noOpts, noOpts); e == nil || e.Name != sodadapi.ErrorDraining || e.Error() != "sodad is stopping: no new sandboxes" {
		t.Errorf("CreateSandbox while draining: %v", e)
	}
}
