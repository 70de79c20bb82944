package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLifeSocketEndsSandbox: when every copy of the host's end of the
// life socket is closed (a supervisor that died with nothing keeping its
// end), the real init kills the command and exits, even one that ignores
// SIGTERM; the exit status reported on the socket before that is the
// command's own.
func TestLifeSocketEndsSandbox(t *testing.T) {
	requireNamespaces(t)
	e := testEngine(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := Spec{Argv: []string{"/bin/sh", "-c", "trap '' TERM; sleep 60"}, Home: t.TempDir(), AllowDegraded: []Layer{LayerCgroup}}
	sb, err := e.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sb.life.Close() // the supervisor is gone
	sb.life = nil
	st, err := sb.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 125 || time.Since(start) > 3*time.Second {
		t.Errorf("after the life socket closed: status %+v after %s, want 125 at once", st, time.Since(start))
	}

	// A command that ends reports its status on the life socket.
	spec.Argv = []string{"/bin/sh", "-c", "exit 7"}
	spec.Home = t.TempDir()
	sb, err = e.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	life, err := dupFile(sb.life, "life")
	if err != nil {
		t.Fatal(err)
	}
	defer life.Close()
	// As after a handover: the successor's copy reads the report, not this
	// Wait (which would take it for the limit counters, readLifeExit).
	hostLife := sb.life
	defer hostLife.Close()
	sb.life = nil
	a := &adoption{pidfd: -1, life: life}
	if st, err := sb.Wait(ctx); err != nil || st.Code != 7 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	_ = a.readExit()
	if code, sig := a.status(); code != 7 || sig != "" || !a.reported {
		t.Errorf("reported on the life socket: %d %q (reported %v), want 7", code, sig, a.reported)
	}
}

// TestAdoptRefuses: Adopt takes nothing it cannot prove is the sandbox:
// an engine that is not adoptable, a missing life socket, an init that is
// gone, a pid now held by another process. Every descriptor passed is
// closed, used or not.
func TestAdoptRefuses(t *testing.T) {
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	start, err := pidStart(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	adoptable := testEngine(t, func(c *Config) { c.Adoptable, c.Cgroups = true, CgroupSystemd })
	plain := testEngine(t, func(c *Config) { c.Cgroups = CgroupDirect })
	tests := []struct {
		name   string
		engine *Linux
		st     HandoverState
		life   bool
		want   string
	}{
		{"engine not adoptable", plain, HandoverState{ID: "a-1", Pid: sleeper.Process.Pid, PidStart: start}, true, "not adoptable"},
		{"bad id", adoptable, HandoverState{ID: "../x", Pid: sleeper.Process.Pid, PidStart: start}, true, "invalid id"},
		{"no life socket", adoptable, HandoverState{ID: "a-1", Pid: sleeper.Process.Pid, PidStart: start}, false, "no life socket"},
		{"init gone", adoptable, HandoverState{ID: "a-1", Pid: dead.Process.Pid, PidStart: start}, true, "is gone"},
		{"pid recycled", adoptable, HandoverState{ID: "a-1", Pid: sleeper.Process.Pid, PidStart: start + 1}, true, "not the sandbox's init"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			null, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]*os.File{HandoverUID: null}
			var life *os.File
			if tc.life {
				life, _, err = lifeSocket()
				if err != nil {
					t.Fatal(err)
				}
				files[HandoverLife] = life
			}
			sb, err := tc.engine.Adopt(context.Background(), tc.st, files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Adopt = %v, %v; want an error saying %q", sb, err, tc.want)
			}
			for name, f := range files {
				if _, err := f.Stat(); err == nil {
					t.Errorf("descriptor %s left open after a refused Adopt", name)
				}
			}
		})
	}
}

// TestUIDAdoptChecksLock: a uid lease is adopted only through its own
// lock file, held by the descriptor passed.
func TestUIDAdoptChecksLock(t *testing.T) {
	dir := t.TempDir()
	p := &uidPool{base: 5000, count: 4, dir: dir}
	l, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	dup, err := dupFile(l.lock, "uid")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.adopt(l.uid, dup); err != nil || got.uid != l.uid {
		t.Errorf("adopt own lock: %v, %v", got, err)
	}
	other := (l.uid-p.base+1)%p.count + p.base
	f, err := os.Create(filepath.Join(dir, strconv.Itoa(other)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := p.adopt(l.uid, f); err == nil || !strings.Contains(err.Error(), "not its lock file") {
		t.Errorf("adopt uid %d through the lock file of %d: %v, want refused", l.uid, other, err)
	}
	if _, err := p.adopt(p.base+p.count, f); err == nil || !strings.Contains(err.Error(), "not in the range") {
		t.Errorf("adopt a uid out of the range: %v, want refused", err)
	}
	// A lock another open file holds is not ours to adopt.
	again, err := os.Open(filepath.Join(dir, strconv.Itoa(l.uid)))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := p.adopt(l.uid, again); err == nil || !strings.Contains(err.Error(), "held by another") {
		t.Errorf("adopt a lock held through another open file: %v, want refused", err)
	}
}

func TestPidStart(t *testing.T) {
	a, err := pidStart(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("pidStart(self) = %d, %v", a, err)
	}
	if _, err := pidStart(1 << 30); err == nil {
		t.Errorf("pidStart of no process: no error")
	}
}

// TestDupClosedFile: copying a file its reader has just closed says so
// (os.ErrClosed), which Handover takes as a status pipe that ended.
func TestDupClosedFile(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r.Close()
	if _, err := dupFile(r, HandoverStatus); !errors.Is(err, os.ErrClosed) {
		t.Errorf("dupFile of a closed file: %v, want os.ErrClosed", err)
	}
}
