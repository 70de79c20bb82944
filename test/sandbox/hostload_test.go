package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestHostResponsive is issue 23's "a sandbox must leave the host
// responsive": a fork bomb, then a CPU burner, runs in a sodactl run
// --direct sandbox as root while testkit.MeasureHost times true, python3
// and ps -e on the host (outside the box, outside the sandbox), against a
// baseline measured just before. Two kinds of sandbox: "host", sodactl
// run on this host itself (no systemd: cgroup v1 directories on a hybrid
// host), and "box", sodactl run in the systemd box (a transient scope in
// soda-sandbox.slice, cgroup hybrid).
//
// The bounds (testkit.DefaultBounds) are generous; the code before issue
// 23 misses them by far under the fork bomb. The CPU burner left the host
// responsive before too (CFS shares it), but took more than the host's
// CPUs but one: the test also checks that the sandbox used at most the
// default quota, max(1, NumCPU-1) CPUs. Measured on the 2-CPU hybrid test
// VM (baselines: true p95 2-6 ms, python3 median 15 ms, ps -e max 15-35 ms):
//
//	                 before (quota 200 %, shares 1024,   after (quota 100 %, weight 20 (*),
//	                 no RLIMIT_NPROC)                    RLIMIT_NPROC = TasksMax)
//	host forkbomb    ps -e killed at 5 s (2 of 2 runs),  ps -e median 90 ms, max 135 ms;
//	                 a python3 run killed at 5 s         true p95 6.5 ms; python3 median 18 ms
//	box forkbomb     ps -e killed at 5 s (2 of 2), a     ps -e median 153 ms, max 314 ms;
//	                 true run killed at 5 s              true p95 14 ms; python3 median 19 ms
//	host cpuburn     ps -e max 46 ms; 1.30 CPUs used     ps -e max 29 ms; 0.88 CPUs used
//	box cpuburn      ps -e max 83 ms; 1.12 CPUs used     ps -e max 114 ms; 0.67 CPUs used
//
// (*) the weight first chosen; the default is a service's (100) now,
// since 20 made ps -e wait 24-42 s with the host's own CPUs busy
// (docs/sandbox.md, "Host cost").
//
// A control makes sure the attack ran: its sandbox used at least a
// quarter of a CPU while it was measured (its cgroup's own CPU time,
// testkit.AttackUsage; the host's /proc/stat would count other load), and
// the fork bomb filled at least half of its task limit. A host that was
// slow before the attack, or as slow after it, is busy with something
// else: the test skips, saying so (testkit.Judge).
func TestHostResponsive(t *testing.T) {
	testkit.RequireHostLoad(t)
	e := requireEnv(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("host lacks: no python3 for the attack: %v", err)
	}
	kinds := []struct {
		name    string
		sodactl func(args ...string) *exec.Cmd
	}{
		{"host", func(args ...string) *exec.Cmd { return exec.Command(filepath.Join(e.bin, "sodactl"), args...) }},
		{"box", func(args ...string) *exec.Cmd {
			return exec.Command(e.sdbox, append([]string{"exec", e.box, "--", filepath.Join(e.bin, "sodactl")}, args...)...)
		}},
	}
	for _, k := range kinds {
		for _, attack := range []string{"forkbomb", "cpuburn"} {
			t.Run(k.name+"/"+attack, func(t *testing.T) {
				e.hostLoad(t, k.name+"-"+attack, attack, k.sodactl)
				if k.name == "box" {
					e.noLeftovers(t)
				}
			})
		}
	}
}

// hostLoad runs attack in a sandbox started by sodactl(ARGS) and checks
// that the host stayed responsive meanwhile.
func (e *env) hostLoad(t *testing.T, name, attack string, sodactl func(args ...string) *exec.Cmd) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(e.bin, "hostload-"+name)
	audit := filepath.Join(e.bin, "audit", "hostload-"+name+".jsonl")
	os.RemoveAll(dir)
	os.Remove(audit)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	a, err := testkit.StartAttack(sodactl("run", "--direct", "--no-network", "--rw", dir, "--audit-json", audit, "--timeout", "120s",
		"--", "python3", "-c", testkit.AttackScript, dir, attack), dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let it ramp up
	during, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 8 * time.Second})
	use, stopErr := a.Stop()
	if err != nil {
		t.Fatalf("measure during the attack: %v", err)
	}
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	after, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 2 * time.Second})
	if err != nil {
		t.Fatalf("measure after the attack: %v", err)
	}
	t.Logf("%s: before: %s", name, before)
	t.Logf("%s: during %s: %s", name, attack, during)
	t.Logf("%s: after: %s", name, after)
	t.Logf("%s: the sandbox used %.2f CPU-seconds in %.1f s, %d processes at the end; exit record %s", name, use.CPU, use.Wall, use.Processes, exitCounters(audit))
	verdict := testkit.Judge(before, during, after, testkit.DefaultBounds())
	if errors.Is(verdict, testkit.ErrBusyHost) {
		t.Skipf("host lacks: %v", verdict)
	}
	if err := use.Check(attack, 1024); err != nil {
		t.Fatalf("control: %v\n%s", err, a.Output())
	}
	if quota := float64(max(1, runtime.NumCPU()-1)); use.CPUs() > quota+0.05 {
		t.Errorf("%s: the sandbox used %.2f CPUs, more than its default quota of %.0f (the host's CPUs but one)", name, use.CPUs(), quota)
	}
	if verdict != nil {
		t.Errorf("%s: %v", name, verdict)
	}
}

// exitCounters are the limit counters of an audit file's exit record.
func exitCounters(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec struct {
			Event string         `json:"event"`
			Exit  map[string]any `json:"exit"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Event == "exit" {
			out, _ := json.Marshal(rec.Exit)
			return string(out)
		}
	}
	return ""
}

// TestHostResponsiveTogether is issue 23's "the quota must hold for all
// of soda's sandboxes together": NumCPU+1 fork bombs at once, each in a
// sodactl run --direct sandbox of its own, on this host (cgroup v1
// directories below the shared soda-sandbox.slice) and in the systemd box
// (scopes in soda-sandbox.slice, whose CPUQuota= soda-generator sets),
// while testkit.MeasureHost times true, python3 and ps -e on the host.
// Each sandbox's own quota (the host's CPUs but one) lets NumCPU+1 of
// them take every CPU; the quota of their common parent leaves the host
// one. Measured by hand on the 2-CPU hybrid test VM with 3 bombs in 3
// sandboxes of their own v1 cgroups: ps -e 27.8-29.9 s and a host true
// 10.2 s; moved into one cgroup of one CPU: ps -e median 8 ms, max 341 ms.
// This test there (baselines: ps -e max 16-19 ms, python3 median 12-14 ms):
//
//	       before (no common parent; the slice     after (soda-sandbox.slice, 100 %)
//	       without CPUQuota=)
//	host   the bombs' commands did not end within   ps -e median 276 ms, max 487 ms;
//	       a minute of DIR/stop: the host stalled   true p95 5.4 ms; python3 median 18 ms;
//	                                                0.89 CPUs together
//	box    ps -e 2 of 2 runs killed at 5 s, one     ps -e median 379 ms, max 538 ms;
//	       python3 too; 8 s of probes took 1m59s    true p95 16 ms; python3 median 18 ms;
//	                                                0.92 CPUs together
//
// Controls: every bomb ran (it filled at least half of its task limit and
// used CPU), and together they used at least half a CPU; the test then
// checks that together they used at most NumCPU-1 CPUs, and the host's
// responsiveness against togetherBounds (testkit.Judge: a host busy before
// the attack, or as slow after it, skips).
func TestHostResponsiveTogether(t *testing.T) {
	testkit.RequireHostLoad(t)
	e := requireEnv(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("host lacks: no python3 for the attack: %v", err)
	}
	n := runtime.NumCPU() + 1
	kinds := []struct {
		name    string
		sodactl func(args ...string) *exec.Cmd
	}{
		{"host", func(args ...string) *exec.Cmd { return exec.Command(filepath.Join(e.bin, "sodactl"), args...) }},
		{"box", func(args ...string) *exec.Cmd {
			return exec.Command(e.sdbox, append([]string{"exec", e.box, "--", filepath.Join(e.bin, "sodactl")}, args...)...)
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			if k.name == "box" {
				r := e.exec(execOpts{}, "systemctl", "show", "-p", "CPUQuotaPerSecUSec", "-p", "DropInPaths", "soda-sandbox.slice")
				t.Logf("the box's soda-sandbox.slice:\n%s", r.stdout)
			}
			e.hostLoadTogether(t, k.name, n, k.sodactl)
			if k.name == "box" {
				e.noLeftovers(t)
			}
		})
	}
}

// hostLoadTogether runs n fork bombs at once, each in a sandbox of its own
// started by sodactl(ARGS), and checks that the host stayed responsive and
// that together they used at most the host's CPUs but one.
func (e *env) hostLoadTogether(t *testing.T, name string, n int, sodactl func(args ...string) *exec.Cmd) {
	t.Helper()
	ctx := context.Background()
	before, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	attacks := make([]*testkit.Attack, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := filepath.Join(e.bin, fmt.Sprintf("together-%s-%d", name, i))
		os.RemoveAll(dir)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			attacks[i], errs[i] = testkit.StartAttack(sodactl("run", "--direct", "--no-network", "--rw", dir, "--timeout", "150s",
				"--", "python3", "-c", testkit.AttackScript, dir, "forkbomb"), dir, 2*time.Minute)
		})
	}
	wg.Wait()
	stopAll := func() ([]testkit.AttackUsage, error) {
		uses := make([]testkit.AttackUsage, n)
		stopErrs := make([]error, n)
		var wg sync.WaitGroup
		for i, a := range attacks {
			if a != nil {
				wg.Go(func() { uses[i], stopErrs[i] = a.Stop() })
			}
		}
		wg.Wait()
		return uses, errors.Join(stopErrs...)
	}
	if err := errors.Join(errs...); err != nil {
		_, _ = stopAll()
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let them ramp up
	during, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 8 * time.Second})
	uses, stopErr := stopAll()
	if err != nil {
		t.Fatalf("measure during the attack: %v", err)
	}
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	after, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 2 * time.Second})
	if err != nil {
		t.Fatalf("measure after the attack: %v", err)
	}
	// Together: their CPU time over the longest of their windows. The
	// bombs start one after another (a sandbox starts slowly while the
	// others bomb) and all stop at once, so the longest window holds every
	// other; the common quota bounds what all of them use in it. A sum of
	// each bomb's own average would count a bomb alone at the start as if
	// the others had run beside it.
	cpu, wall := 0.0, 0.0
	for i, u := range uses {
		t.Logf("%s: bomb %d used %.2f CPU-seconds in %.1f s (%.2f CPUs), %d processes at the end", name, i, u.CPU, u.Wall, u.CPUs(), u.Processes)
		cpu += u.CPU
		wall = max(wall, u.Wall)
	}
	total := 0.0
	if wall > 0 {
		total = cpu / wall
	}
	t.Logf("%s: before: %s", name, before)
	t.Logf("%s: during %d fork bombs: %s", name, n, during)
	t.Logf("%s: after: %s", name, after)
	t.Logf("%s: the %d sandboxes together used %.2f CPUs (the host has %d)", name, n, total, runtime.NumCPU())
	verdict := testkit.Judge(before, during, after, togetherBounds())
	if errors.Is(verdict, testkit.ErrBusyHost) {
		t.Skipf("host lacks: %v", verdict)
	}
	// Each bomb ran: a quarter of its task limit is far beyond what a
	// sandbox that does not bomb holds. Not half: the last bomb starts
	// while the others already hold the common quota, and a CI run saw it
	// end at 511 processes after 3.8 CPU-seconds of forking.
	for i, u := range uses {
		if u.Processes < 1024/4 || u.CPUs() < 0.05 {
			t.Fatalf("control: bomb %d had %d processes (want at least a quarter of its task limit, 1024) and used %.2f CPUs: it did not run\n%s", i, u.Processes, u.CPUs(), attacks[i].Output())
		}
	}
	if total < 0.5 {
		t.Fatalf("control: the %d bombs together used %.2f CPUs, less than half a CPU: they did not load the host", n, total)
	}
	if quota := float64(max(1, runtime.NumCPU()-1)); total > quota+0.05*float64(n) {
		t.Errorf("%s: the %d sandboxes together used %.2f CPUs, more than the host's CPUs but one (%.0f)", name, n, total, quota)
	}
	if verdict != nil {
		t.Errorf("%s: %v", name, verdict)
	}
}

// togetherBounds are testkit.DefaultBounds with 1 s, not 50 ms, of slack
// on a host true's p95 while NumCPU+1 fork bombs run at once: enough to
// catch a stall (before the common quota a host true took 10.2 s), not a
// measure of latency on a 2-CPU VM with steal time. Their kernel-side cost
// is partly outside any quota: a refused fork runs in the kernel, where
// the throttle waits for the return to user mode (the bombs together used
// 1.04-1.07 CPUs against the 1 of their common quota), and the
// unthrottling of their thousands of tasks each period runs in softirq,
// charged to no cgroup. Eight runs measured a host true's p95 at 9 to
// 154 ms (baselines 2-14 ms). ps -e and python3 keep the default bounds,
// and the common quota is checked on the CPU the bombs used.
func togetherBounds() testkit.Bounds {
	b := testkit.DefaultBounds()
	b.TrueSlack = time.Second
	return b
}
