package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// attackScript is the attack run in the sandbox (python3 -c attackScript
// DIR KIND): KIND forkbomb is the fork loop (every process forks
// for ever, ignoring the refusals); cpuburn is 8 busy loops. The first
// process writes DIR/started once the attack runs and ends the sandbox
// when DIR/stop appears (it forks nothing meanwhile, so it never waits
// for a task slot).
const attackScript = `
import os, sys, time
d, kind = sys.argv[1], sys.argv[2]
def bomb():
    while True:
        try:
            os.fork()
        except OSError:
            pass
def burn():
    while True:
        pass
if kind == 'forkbomb':
    if os.fork() == 0:
        bomb()
else:
    for _ in range(8):
        if os.fork() == 0:
            burn()
open(d + '/started', 'w').close()
end = time.time() + 90
while not os.path.exists(d + '/stop') and time.time() < end:
    time.sleep(0.1)
os._exit(0)
`

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
// 23 misses them by far under the fork bomb. Measured on the 2-CPU hybrid
// test VM (baseline: true p95 1.6 ms, python3 median 15 ms, ps -e max
// 25 ms):
//
//	before (quota 200 %, shares 1024, no RLIMIT_NPROC):
//	  host forkbomb: ps -e killed at 5 s (2 of 2 runs); box: the same
//	  host cpuburn: true p95 22 ms, python3 max 400 ms, ps -e max 1.3 s
//	  box cpuburn: true p95 5 ms, ps -e max 31 ms
//
// A control makes sure the attack ran: the host's CPUs were busy (at
// least 0.8 of one CPU beyond the baseline's) while it was measured.
func TestHostResponsive(t *testing.T) {
	e := requireEnv(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("SKIP: no python3 for the attack: %v", err)
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
	base, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	baseBusy := busyCPUs(t, 1*time.Second)

	cmd := sodactl("run", "--direct", "--no-network", "--rw", dir, "--audit-json", audit, "--timeout", "120s",
		"--", "python3", "-c", attackScript, dir, attack)
	var stdout, stderr testkit.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sodactl: %v", err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	stop := func() error {
		_ = os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		select {
		case <-done:
			return waitErr
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("sodactl did not end within 60 s of the stop file: %v", waitErr)
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
	})
	started := false
wait:
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			started = true
			break
		}
		select {
		case <-done:
			break wait
		default:
		}
	}
	if !started {
		stopped = true
		err := stop()
		t.Fatalf("the attack did not start in 60 s (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	time.Sleep(time.Second) // let it ramp up
	busyStart := readCPUTimes(t)
	during, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 8 * time.Second})
	busy := busyStart.busySince(readCPUTimes(t))
	stopped = true
	stopErr := stop()
	if err != nil {
		t.Fatalf("measure during the attack: %v", err)
	}
	t.Logf("%s: baseline: %s; busy CPUs %.2f", name, base, baseBusy)
	t.Logf("%s: during %s: %s; busy CPUs %.2f", name, attack, during, busy)
	if counters := exitCounters(audit); counters != "" {
		t.Logf("%s: the sandbox's exit record: %s", name, counters)
	}
	if stopErr != nil {
		t.Errorf("sodactl: %v\nstderr:\n%s", stopErr, stderr.String())
	}
	// Control: the attack loaded the host.
	if busy-baseBusy < 0.8 {
		t.Fatalf("control: the host's CPUs were busy %.2f during the attack (%.2f before): the attack did not run\nstderr:\n%s", busy, baseBusy, stderr.String())
	}
	if err := during.Check(base, testkit.DefaultBounds()); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

// cpuTimes are the host's busy and total jiffies (/proc/stat).
type cpuTimes struct{ busy, total uint64 }

func readCPUTimes(t *testing.T) cpuTimes {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: %q", line)
	}
	var c cpuTimes
	for i, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q", line)
		}
		if i >= 8 { // guest time is counted in user already
			break
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

// busySince is how many CPUs were busy, on average, from c to now.
func (c cpuTimes) busySince(now cpuTimes) float64 {
	if now.total == c.total {
		return 0
	}
	return float64(now.busy-c.busy) / float64(now.total-c.total) * float64(runtime.NumCPU())
}

// busyCPUs measures how many CPUs are busy over d.
func busyCPUs(t *testing.T, d time.Duration) float64 {
	c := readCPUTimes(t)
	time.Sleep(d)
	return c.busySince(readCPUTimes(t))
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
