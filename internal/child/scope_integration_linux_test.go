package child

// Integration test of a supervised child in a systemd scope; it runs with
// the systemd scope placer's integration tests (internal/cgroup,
// scope_integration_linux_test.go), in a throw-away box:
// test/systemd/run-child-scope-test.sh.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
)

func requireSystemd(t *testing.T) {
	t.Helper()
	if os.Getenv("SODA_SYSTEMD_TEST") != "1" {
		t.Skip("systemd integration test: set SODA_SYSTEMD_TEST=1 and run it where systemd is PID 1 (test/systemd/run-child-scope-test.sh does both in a throw-away box)")
	}
	if err := cgroup.CheckSystemdPID1(); err != nil {
		t.Skipf("systemd integration test: %v (run test/systemd/run-child-scope-test.sh)", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("systemd integration test: needs root to create system scopes")
	}
}

// TestScopeIntegrationSupervised: a supervised child in a scope. The real
// command and all it starts are in the scope (small TasksMax: the
// supervisor's threads are not), the supervisor is not; SIGKILL of the
// parent leaves nothing, and the scopes go away.
func TestScopeIntegrationSupervised(t *testing.T) {
	requireSystemd(t)
	m := sleepMarks()
	argv := []string{"sh", "-c", fmt.Sprintf("setsid sleep %s & sleep %s & exec sleep %s", m[0], m[1], m[2])}
	parent, cs := startFakeParent(t, 2, argv, "SODA_CHILD_TEST_MODE=scope")
	pids := waitSleepers(t, m, 6)
	t.Cleanup(func() {
		for _, p := range sleepers(m) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	// Membership by the scopes' own lists: /proc/PID/cgroup is relative
	// to the reader's cgroup namespace.
	inScopes := map[string]bool{}
	for _, c := range cs {
		if c.Cgroup == "" {
			t.Fatalf("child %d: no scope cgroup", c.Pid)
		}
		b, _ := os.ReadFile(filepath.Join(c.Cgroup, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			inScopes[f] = true
		}
	}
	for _, c := range cs {
		if inScopes[strconv.Itoa(c.SupPid)] {
			t.Errorf("supervisor %d is inside a child's scope", c.SupPid)
		}
	}
	for _, pid := range pids {
		if !inScopes[strconv.Itoa(pid)] {
			t.Errorf("pid %d (%q) is outside the children's scopes", pid, cmdline(pid))
		}
	}
	parent.Process.Kill()
	parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); len(sleepers(m)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGKILL of the parent, left: %v", sleepers(m))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range cs {
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, err := os.Stat(c.Cgroup); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("scope cgroup %s still exists", c.Cgroup)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
