package cgroup_test

// Integration tests of the systemd scope placer. They need a real systemd
// as PID 1 and run only with SODA_SYSTEMD_TEST=1, inside a throw-away box:
// test/systemd/run-child-scope-test.sh builds this package's test binary on
// the host and runs it in a systemd-box (--cgroup hybrid, then v2).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/child"
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

func newTestScopePlacer(t *testing.T, limits cgroup.Limits) *cgroup.ScopePlacer {
	t.Helper()
	p, err := cgroup.NewSystemdPlacer(t.Context(), cgroup.NewTestLogger(t), "soda-test", cgroup.DefaultSlice, limits)
	if err != nil {
		t.Fatalf("cgroup.NewSystemdPlacer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var testChildSeq int

func startScoped(t *testing.T, p *cgroup.ScopePlacer, argv ...string) (*child.Process, *cgroup.ScopeGroup) {
	t.Helper()
	testChildSeq++
	id := fmt.Sprintf("%s-%d-%d", strings.ToLower(strings.TrimPrefix(t.Name(), "TestScopeIntegration")), os.Getpid(), testChildSeq)
	id = strings.ReplaceAll(id, "/", "-")
	proc, err := child.Start(t.Context(), cgroup.NewTestLogger(t), p, id, child.Spec{Argv: argv})
	if err != nil {
		t.Fatalf("Start %q: %v", argv, err)
	}
	t.Cleanup(func() { proc.Stop(child.Grace{}) })
	g := proc.Group().(*cgroup.ScopeGroup)
	t.Logf("child %d in %s, cgroup %s (%s)", proc.Pid(), g.Unit(), g.ControlGroup(), g.CgroupDir())
	return proc, g
}

func scopeProps(t *testing.T, p *cgroup.ScopePlacer, unit string) (map[string]any, map[string]any) {
	t.Helper()
	conn, err := p.Connection(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	up, err := conn.GetUnitPropertiesContext(t.Context(), unit)
	if err != nil {
		t.Fatalf("unit properties of %s: %v", unit, err)
	}
	sp, err := conn.GetUnitTypePropertiesContext(t.Context(), unit, "Scope")
	if err != nil {
		t.Fatalf("scope properties of %s: %v", unit, err)
	}
	return up, sp
}

// unitLoaded reports whether systemd has the unit loaded, without making
// it load one (ListUnitsByPatterns only looks at loaded units).
func unitLoaded(t *testing.T, p *cgroup.ScopePlacer, unit string) bool {
	t.Helper()
	conn, err := p.Connection(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	us, err := conn.ListUnitsByPatternsContext(t.Context(), nil, []string{cgroup.GlobEscape(unit)})
	if err != nil {
		t.Fatalf("list units: %v", err)
	}
	return len(us) > 0
}

func waitUnitGone(t *testing.T, p *cgroup.ScopePlacer, unit string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for unitLoaded(t, p, unit) {
		if time.Now().After(deadline) {
			up, _ := scopeProps(t, p, unit)
			t.Fatalf("unit %s still loaded after stop: ActiveState=%v SubState=%v", unit, up["ActiveState"], up["SubState"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSleeps waits until the scope holds n "sleep" processes and returns
// all of its pids.
func waitSleeps(t *testing.T, g *cgroup.ScopeGroup, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := g.Procs()
		if err != nil {
			t.Fatal(err)
		}
		sleeps := 0
		for _, pid := range pids {
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
				sleeps++
			}
		}
		if sleeps == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds pids %v with %d sleep processes, want %d", g.Unit(), pids, sleeps, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// managedCgroups keeps the hierarchies systemd places units in: the unified
// one, its own named v1 one (hybrid) and the mounted v1 hierarchies of the
// controllers the limits need. The kernel lists the others too (blkio,
// freezer, ...; in a v2 box even the host's unmounted v1 hierarchies), but
// systemd leaves them alone.
func managedCgroups(p *cgroup.ScopePlacer, cgs map[string]string) map[string]string {
	out := map[string]string{}
	for h, path := range cgs {
		keep := h == "" || (h == "name=systemd" && p.NamedV1())
		for c := range strings.SplitSeq(h, ",") {
			if slices.Contains([]string{"memory", "pids", "cpu"}, c) && slices.Contains(p.V1Controllers(), c) {
				keep = true
			}
		}
		if keep {
			out[h] = path
		}
	}
	return out
}

// cgroupsOf returns the cgroup paths of pid, keyed by hierarchy controllers
// ("" for the unified one, "name=systemd", "memory", ...).
func cgroupsOf(pid int) map[string]string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			m[parts[1]] = parts[2]
		}
	}
	return m
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// waitDead waits until none of pids is a live process. A process leaves its
// cgroup a moment before it turns into a zombie, so an empty cgroup does
// not yet mean every /proc entry says so.
func waitDead(t *testing.T, pids []int, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d survived %s", pid, what)
		}
	}
}

func readLine(t *testing.T, r *bufio.Reader, timeout time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return strings.TrimSpace(s)
	case <-time.After(timeout):
		t.Fatalf("no line from the child within %s", timeout)
		return ""
	}
}

// TestScopeIntegrationLifecycle: a child and its background process live in
// their own scope under the slice with the configured limits, never in the
// test's cgroup; Stop kills both and the unit is gone.
func TestScopeIntegrationLifecycle(t *testing.T) {
	requireSystemd(t)
	limits := cgroup.Limits{MemoryMax: 256 << 20, TasksMax: 32, CPUQuota: 50, CPUWeight: 50}
	p := newTestScopePlacer(t, limits)
	proc, g := startScoped(t, p, "sh", "-c", "sleep 1000 & sleep 1000")

	up, sp := scopeProps(t, p, g.Unit())
	if up["ActiveState"] != "active" {
		t.Errorf("ActiveState = %v, want active", up["ActiveState"])
	}
	if sp["Slice"] != cgroup.DefaultSlice {
		t.Errorf("Slice = %v, want %s", sp["Slice"], cgroup.DefaultSlice)
	}
	if !strings.Contains(g.ControlGroup(), "/"+cgroup.DefaultSlice+"/") || !strings.HasSuffix(g.ControlGroup(), "/"+g.Unit()) {
		t.Errorf("ControlGroup %s is not %s under the slice", g.ControlGroup(), g.Unit())
	}
	for name, want := range map[string]any{
		"MemoryMax":          uint64(limits.MemoryMax),
		"TasksMax":           uint64(limits.TasksMax),
		"CPUQuotaPerSecUSec": uint64(500000),
		"CPUWeight":          uint64(50),
		"MemoryAccounting":   true,
		"TasksAccounting":    true,
		"SendSIGKILL":        true,
		"TimeoutStopUSec":    cgroup.ScopeStopUSec,
	} {
		if sp[name] != want {
			t.Errorf("scope %s = %#v, want %#v", name, sp[name], want)
		}
	}
	if up["CollectMode"] != "inactive-or-failed" {
		t.Errorf("CollectMode = %v", up["CollectMode"])
	}

	// sh (dash does not exec the last command) and both sleeps.
	pids := waitSleeps(t, g, 2)
	if n := g.Count(); n != 3 {
		t.Errorf("Count() = %d, want 3 (sh and two sleeps): %v", n, pids)
	}
	own := cgroupsOf(os.Getpid())
	for _, pid := range pids {
		for h, path := range managedCgroups(p, cgroupsOf(pid)) {
			if path == own[h] {
				t.Errorf("pid %d shares the test's cgroup %s (%q)", pid, path, h)
			}
			if path != g.ControlGroup() {
				t.Errorf("pid %d is in %q:%s, want %s", pid, h, path, g.ControlGroup())
			}
		}
	}

	// Where the kernel enforces the limits, the cgroup files say so.
	for _, f := range []struct{ path, want string }{
		{"/sys/fs/cgroup/memory" + g.ControlGroup() + "/memory.limit_in_bytes", strconv.FormatInt(limits.MemoryMax, 10)},
		{"/sys/fs/cgroup/pids" + g.ControlGroup() + "/pids.max", "32"},
		{"/sys/fs/cgroup/cpu" + g.ControlGroup() + "/cpu.cfs_quota_us", "50000"},
		{filepath.Join(g.CgroupDir(), "memory.max"), strconv.FormatInt(limits.MemoryMax, 10)},
		{filepath.Join(g.CgroupDir(), "pids.max"), "32"},
	} {
		if b, err := os.ReadFile(f.path); err == nil {
			if got := strings.TrimSpace(string(b)); got != f.want {
				t.Errorf("%s = %s, want %s", f.path, got, f.want)
			} else {
				t.Logf("enforced: %s = %s", f.path, got)
			}
		}
	}

	start := time.Now()
	proc.Stop(child.Grace{AfterStdinClose: 100 * time.Millisecond, AfterTerm: 2 * time.Second})
	t.Logf("stopped in %s", time.Since(start).Round(time.Millisecond))
	waitDead(t, pids, "Stop")
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationNoEscapeWindow: the real command's very first process
// image already runs inside the scope.
func TestScopeIntegrationNoEscapeWindow(t *testing.T) {
	requireSystemd(t)
	p := newTestScopePlacer(t, cgroup.Limits{})
	proc, g := startScoped(t, p, "cat", "/proc/self/cgroup")
	out := bufio.NewReader(proc.Stdout)
	seen := false
	for {
		line := readLine(t, out, 10*time.Second)
		if line == "" {
			break
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == "" || (parts[1] == "name=systemd" && p.NamedV1())) {
			seen = true
			if parts[2] != g.ControlGroup() {
				t.Errorf("the command started in %s, not in its scope %s", line, g.ControlGroup())
			}
		}
	}
	if !seen {
		t.Fatal("cat printed no unified or name=systemd cgroup line")
	}
	proc.Stop(child.Grace{AfterStdinClose: time.Second})
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationKillIgnoresTerm: processes that ignore SIGTERM are
// killed as a whole after the grace period.
func TestScopeIntegrationKillIgnoresTerm(t *testing.T) {
	requireSystemd(t)
	p := newTestScopePlacer(t, cgroup.Limits{})
	proc, g := startScoped(t, p, "sh", "-c", `trap "" TERM; sleep 1000 & sleep 1000 & wait`)
	pids := waitSleeps(t, g, 2)
	start := time.Now()
	proc.Stop(child.Grace{AfterStdinClose: 50 * time.Millisecond, AfterTerm: 200 * time.Millisecond})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %s", d)
	}
	waitDead(t, pids, "Stop")
	if n := g.Count(); n != 0 {
		t.Errorf("Count() = %d after Stop", n)
	}
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationKillWithoutCgroupKill: without a usable cgroup.kill
// (old kernel, v1-only host, ProtectControlGroups=) Kill still empties the
// scope, through systemd and per-pid signals.
func TestScopeIntegrationKillWithoutCgroupKill(t *testing.T) {
	requireSystemd(t)
	defer cgroup.SetCgroupKillFile("cgroup.kill-missing-in-this-test")()
	p := newTestScopePlacer(t, cgroup.Limits{})
	proc, g := startScoped(t, p, "sh", "-c", `trap "" TERM; sleep 1000 & sleep 1000 & wait`)
	pids := waitSleeps(t, g, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if n := g.Count(); n != 0 {
		t.Errorf("Count() = %d after Kill", n)
	}
	waitDead(t, pids, "Kill")
	proc.Stop(child.Grace{})
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationMemoryMax: a child that allocates beyond MemoryMax is
// OOM-killed inside its scope; a sibling child and the test carry on.
func TestScopeIntegrationMemoryMax(t *testing.T) {
	requireSystemd(t)
	limits := cgroup.Limits{MemoryMax: 50 << 20}
	p := newTestScopePlacer(t, limits)
	if missing := p.UnenforcedOf(limits); len(missing) > 0 {
		t.Skip("memory controller not available to systemd here, MemoryMax is accepted but not enforced (boot the box with --cgroup hybrid)")
	}
	sibling, sg := startScoped(t, p, "sleep", "1000")
	proc, g := startScoped(t, p, "sh", "-c", `head -c 200m /dev/zero | tail; echo "rc=$?"; exec sleep 1000`)
	line := readLine(t, bufio.NewReader(proc.Stdout), 60*time.Second)
	if line != "rc=137" {
		t.Errorf("the memory hog ended with %q, want rc=137 (SIGKILL by the OOM killer)", line)
	}
	oomKills := -1
	for _, f := range []string{"/sys/fs/cgroup/memory" + g.ControlGroup() + "/memory.oom_control", filepath.Join(g.CgroupDir(), "memory.events")} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				oomKills, _ = strconv.Atoi(v)
				t.Logf("%s: oom_kill %d", f, oomKills)
			}
		}
	}
	if oomKills == 0 {
		t.Error("the scope's cgroup counts no OOM kill")
	}
	if !alive(sibling.Pid()) || sg.Count() != 1 {
		t.Error("the sibling child did not survive the other scope's OOM kill")
	}
	if up, _ := scopeProps(t, p, g.Unit()); up["ActiveState"] != "active" {
		t.Errorf("scope of the OOM-killed child: ActiveState %v, want active (sh lives on)", up["ActiveState"])
	}
	proc.Stop(child.Grace{AfterStdinClose: 50 * time.Millisecond, AfterTerm: time.Second})
	sibling.Stop(child.Grace{AfterStdinClose: 50 * time.Millisecond, AfterTerm: time.Second})
	waitUnitGone(t, p, g.Unit())
	waitUnitGone(t, p, sg.Unit())
}

// TestScopeIntegrationTasksMax: forks beyond TasksMax fail inside the scope.
func TestScopeIntegrationTasksMax(t *testing.T) {
	requireSystemd(t)
	limits := cgroup.Limits{TasksMax: 8}
	p := newTestScopePlacer(t, limits)
	if missing := p.UnenforcedOf(limits); len(missing) > 0 {
		t.Skip("pids controller not available to systemd here, TasksMax is accepted but not enforced (boot the box with --cgroup hybrid)")
	}
	// dash gives up at the first failed fork, with a message.
	proc, g := startScoped(t, p, "sh", "-c", `i=0; while [ $i -lt 20 ]; do sleep 1000 & i=$((i+1)); done; echo all 20 forks worked >&2`)
	msg := readLine(t, bufio.NewReader(proc.Stderr), 10*time.Second)
	if !strings.Contains(msg, "fork") {
		t.Errorf("stderr %q, want a failed fork", msg)
	}
	if n := g.Count(); n > 8 || n < 2 {
		t.Errorf("scope holds %d processes, want 2..8 under TasksMax=8", n)
	} else {
		t.Logf("scope holds %d processes under TasksMax=8; sh said %q", n, msg)
	}
	proc.Stop(child.Grace{AfterStdinClose: 50 * time.Millisecond, AfterTerm: time.Second})
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationStopPropagated: when the bridge runs in a service,
// the end of that service (stop, restart, crash of its main process) ends
// the children's scopes too, after the service itself has stopped.
func TestScopeIntegrationStopPropagated(t *testing.T) {
	requireSystemd(t)
	for _, how := range []string{"stop", "restart", "crash", "crash-autorestart"} {
		t.Run(how, func(t *testing.T) {
			p := newTestScopePlacer(t, cgroup.Limits{})
			conn, err := p.Connection(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			svc := fmt.Sprintf("soda-test-bridge-%s-%d.service", how, os.Getpid())
			done := make(chan string, 1)
			props := []sdbus.Property{sdbus.PropExecStart([]string{"/bin/sleep", "1000"}, false)}
			if how == "crash-autorestart" {
				props = append(props,
					sdbus.Property{Name: "Restart", Value: dbus.MakeVariant("on-failure")},
					sdbus.Property{Name: "RestartUSec", Value: dbus.MakeVariant(uint64(100000))},
				)
			}
			if _, err := conn.StartTransientUnitContext(t.Context(), svc, "fail", props, done); err != nil {
				t.Fatalf("start %s: %v", svc, err)
			}
			if res := <-done; res != "done" {
				t.Fatalf("start %s: %s", svc, res)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				_, _ = conn.StopUnitContext(ctx, svc, "replace", nil)
				_ = conn.ResetFailedUnitContext(ctx, svc)
			})
			p.SetBindTo(svc)
			proc, g := startScoped(t, p, "sh", "-c", "sleep 1000 & sleep 1000")
			pids := waitSleeps(t, g, 2)
			up, _ := scopeProps(t, p, g.Unit())
			if !slices.Contains(asStrings(up["StopPropagatedFrom"]), svc) || !slices.Contains(asStrings(up["Before"]), svc) {
				t.Errorf("scope: StopPropagatedFrom=%v Before=%v, want %s in both", up["StopPropagatedFrom"], up["Before"], svc)
			}

			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			switch how {
			case "stop":
				_, err = conn.StopUnitContext(ctx, svc, "replace", done)
			case "restart":
				_, err = conn.RestartUnitContext(ctx, svc, "replace", done)
			case "crash", "crash-autorestart":
				err = conn.KillUnitWithTarget(ctx, svc, sdbus.Main, int32(syscall.SIGKILL))
				done <- "done"
			}
			if err != nil {
				t.Fatalf("%s %s: %v", how, svc, err)
			}
			select {
			case res := <-done:
				if res != "done" {
					t.Fatalf("%s %s: job %s", how, svc, res)
				}
			case <-ctx.Done():
				t.Fatalf("%s %s: job did not finish", how, svc)
			}
			if how == "restart" {
				// systemd does not propagate a restart; the new process
				// stops what the old one left (SweepLeftovers), once the
				// old one is gone: while its owner lives, a scope stays.
				time.Sleep(100 * time.Millisecond)
				if !unitLoaded(t, p, g.Unit()) {
					t.Log("systemd propagated the restart after all")
				}
				if got, err := p.SweepLeftovers(ctx); err != nil || len(got) != 0 {
					t.Errorf("SweepLeftovers stopped %v of a live owner: %v", got, err)
				}
				g.DropLock() // as the owner's death does
				if got, err := p.SweepLeftovers(ctx); err != nil || len(got) != 1 || got[0] != g.Unit() {
					t.Errorf("SweepLeftovers stopped %v (want %s): %v", got, g.Unit(), err)
				}
			}
			waitUnitGone(t, p, g.Unit())
			waitDead(t, pids, "the "+how+" of the bridge's service")
			// The bridge's own Stop afterwards finds nothing left.
			proc.Stop(child.Grace{})
		})
	}
}

// TestScopeIntegrationUnprivileged: a user that polkit does not allow to
// manage units gets an error from cgroup.NewSystemdPlacer (so the caller falls
// back), not a placer whose every Start fails.
func TestScopeIntegrationUnprivileged(t *testing.T) {
	if os.Getenv("SODA_SCOPE_PROBE_CHILD") == "1" {
		_, err := cgroup.NewSystemdPlacer(t.Context(), cgroup.NewTestLogger(t), "soda-test", "", cgroup.Limits{})
		fmt.Printf("RESULT %v\n", err)
		return
	}
	requireSystemd(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestScopeIntegrationUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "SODA_SCOPE_PROBE_CHILD=1")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run the test binary as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "RESULT systemd placer: uid 65534 may not create transient units") {
		t.Errorf("as nobody, cgroup.NewSystemdPlacer did not refuse:\n%s", out)
	}
}

func asStrings(v any) []string {
	s, _ := v.([]string)
	return s
}

// TestScopeIntegrationSignalUsesCgroup: Signal reaches every process of the
// scope, including one that left the child's process group.
func TestScopeIntegrationSignalUsesCgroup(t *testing.T) {
	requireSystemd(t)
	p := newTestScopePlacer(t, cgroup.Limits{})
	proc, g := startScoped(t, p, "sh", "-c", "setsid sleep 1000 & sleep 1000")
	pids := waitSleeps(t, g, 2)
	if err := g.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDead(t, pids, "SIGTERM")
	proc.Stop(child.Grace{})
	waitUnitGone(t, p, g.Unit())
}

// TestScopeIntegrationTinyTasksMax: the gate (a Go process with several
// threads) survives being placed in a scope whose TasksMax is below its
// thread count, and the real command runs. Regression test for the gate
// creating runtime threads after placement (pthread_create: EAGAIN).
func TestScopeIntegrationTinyTasksMax(t *testing.T) {
	requireSystemd(t)
	probe := cgroup.Limits{TasksMax: 1}
	if len(newTestScopePlacer(t, probe).UnenforcedOf(probe)) > 0 {
		t.Skip("pids controller not available to systemd here (boot the box with --cgroup hybrid)")
	}
	for i := range 20 {
		limits := cgroup.Limits{TasksMax: int64(i%4 + 1)}
		p := newTestScopePlacer(t, limits)
		proc, _ := startScoped(t, p, "sh", "-c", "echo hi; exec sleep 1000")
		got := make(chan string, 1)
		go func() {
			s, _ := bufio.NewReader(proc.Stdout).ReadString('\n')
			got <- s
		}()
		select {
		case <-got:
		case <-proc.Exited():
			msg, _ := io.ReadAll(proc.Stderr)
			t.Errorf("TasksMax=%d: child ended (%s) before running the command: %s", limits.TasksMax, proc.ExitStatus(), msg)
		case <-time.After(5 * time.Second):
			t.Errorf("TasksMax=%d: no output within 5s", limits.TasksMax)
		}
		proc.Stop(child.Grace{})
	}
}

// siblingEnv makes the test binary a stand-in process of TestScopeIntegrationSiblings
// or TestScopeIntegrationKilledOwner.
const siblingEnv = "SODA_SCOPE_SIBLING_CHILD"

// scopedSleep places a sleep in a new scope of p (no gate) and returns it.
func scopedSleep(ctx context.Context, p *cgroup.ScopePlacer, id string) (*exec.Cmd, cgroup.Group, error) {
	g, err := p.NewGroup(id)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	if err := g.Started(ctx, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, err
	}
	return cmd, g, nil
}

// TestScopeIntegrationSiblings: two processes of one systemd service (a CI
// runner running two agents), each with its own placer of the same
// prefix: the second one's start and sweep leave the first one's live
// scope alone, and the first one's scope ends only with its own release.
// Before the fix, cgroup.NewSystemdPlacer stopped every scope of the prefix whose
// StopPropagatedFrom named its service, that is the sibling's.
func TestScopeIntegrationSiblings(t *testing.T) {
	if os.Getenv(siblingEnv) == "siblings" {
		// Inside the service: two placers as two processes would make.
		ctx := t.Context()
		p1, err := cgroup.NewSystemdPlacer(ctx, cgroup.NewTestLogger(t), "soda-sibtest", cgroup.DefaultSlice, cgroup.Limits{TasksMax: 9})
		if err != nil {
			t.Fatal(err)
		}
		defer p1.Close()
		p1.WithoutGate()
		if p1.BindTo() == "" {
			t.Fatal("not in a service")
		}
		cmd, g, err := scopedSleep(ctx, p1, "one")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = g.Kill(ctx); _ = g.Release(); _ = cmd.Wait() }()
		p2, err := cgroup.NewSystemdPlacer(ctx, cgroup.NewTestLogger(t), "soda-sibtest", cgroup.DefaultSlice, cgroup.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer p2.Close()
		stopped, err := p2.SweepLeftovers(ctx)
		fmt.Printf("SWEPT %v %v\n", stopped, err)
		time.Sleep(200 * time.Millisecond)
		fmt.Printf("ALIVE %v\n", alive(cmd.Process.Pid))
		return
	}
	requireSystemd(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := fmt.Sprintf("soda-sibtest-svc-%d.service", os.Getpid())
	out, err := exec.Command("systemd-run", "--quiet", "--wait", "--pipe", "--unit", unit, "-p", "StandardError=journal",
		"--setenv", siblingEnv+"=siblings", self, "-test.run", "^TestScopeIntegrationSiblings$", "-test.v").CombinedOutput()
	if err != nil {
		t.Fatalf("run the siblings in %s: %v\n%s", unit, err, out)
	}
	if !strings.Contains(string(out), "SWEPT [] <nil>") || !strings.Contains(string(out), "ALIVE true") {
		t.Errorf("the second placer of a service ended the first one's live scope:\n%s", out)
	}
}

// TestScopeIntegrationKilledOwner: the scope of a process killed with
// SIGKILL (it could not stop its scopes) is a leftover, and the next
// placer's SweepLeftovers stops it and kills what runs in it.
func TestScopeIntegrationKilledOwner(t *testing.T) {
	if os.Getenv(siblingEnv) == "owner" {
		ctx := t.Context()
		p, err := cgroup.NewSystemdPlacer(ctx, cgroup.NewTestLogger(t), "soda-sibtest", cgroup.DefaultSlice, cgroup.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		p.WithoutGate()
		cmd, _, err := scopedSleep(ctx, p, fmt.Sprintf("dead-%d", os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("PLACED %d %s\n", cmd.Process.Pid, p.UnitName(fmt.Sprintf("dead-%d", os.Getpid())))
		time.Sleep(time.Minute) // killed meanwhile
		return
	}
	requireSystemd(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	owner := exec.Command(self, "-test.run", "^TestScopeIntegrationKilledOwner$", "-test.v")
	owner.Env = append(os.Environ(), siblingEnv+"=owner")
	stdout, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	var pid int
	var unit string
	r := bufio.NewReader(stdout)
	for unit == "" {
		line := readLine(t, r, 30*time.Second)
		if _, err := fmt.Sscanf(line, "PLACED %d %s", &pid, &unit); err == nil {
			break
		}
	}
	p := newTestScopePlacer(t, cgroup.Limits{})
	p.SetPrefix("soda-sibtest")
	if got, err := p.SweepLeftovers(t.Context()); err != nil || slices.Contains(got, unit) {
		t.Fatalf("swept %v of a live owner: %v", got, err)
	}
	_ = owner.Process.Kill()
	_ = owner.Wait()
	if !unitLoaded(t, p, unit) || !alive(pid) {
		t.Fatalf("the scope %s did not outlive its killed owner: nothing to test", unit)
	}
	got, err := p.SweepLeftovers(t.Context())
	if err != nil || !slices.Contains(got, unit) {
		t.Fatalf("SweepLeftovers = %v, %v; want %s stopped", got, err, unit)
	}
	waitUnitGone(t, p, unit)
	waitDead(t, []int{pid}, "the sweep of its scope")
}
