package testkit

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []time.Duration
		want Sample
	}{
		{"none", nil, Sample{}},
		{"one", []time.Duration{ms(3)}, Sample{N: 1, Median: ms(3), P95: ms(3), Max: ms(3)}},
		{"unsorted", []time.Duration{ms(5), ms(1), ms(3)}, Sample{N: 3, Median: ms(3), P95: ms(5), Max: ms(5)}},
		// 20 runs: the 19th is the 95th percentile.
		{"twenty", func() []time.Duration {
			var d []time.Duration
			for i := 20; i >= 1; i-- {
				d = append(d, ms(float64(i)))
			}
			return d
		}(), Sample{N: 20, Median: ms(11), P95: ms(19), Max: ms(20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.runs, nil, 0); got != tc.want {
				t.Errorf("summarize: %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	base := HostLoad{
		True:   Sample{N: 50, Median: ms(1), P95: ms(2), Max: ms(3)},
		Python: Sample{N: 50, Median: ms(50), P95: ms(60), Max: ms(70), CPU: ms(40)},
		PS:     Sample{N: 50, Median: ms(30), P95: ms(40), Max: ms(50)},
	}
	for _, tc := range []struct {
		name string
		load func(l *HostLoad)
		want []string // substrings of the error; none: no error
	}{
		{"same", func(*HostLoad) {}, nil},
		{"within", func(l *HostLoad) { l.True.P95, l.Python.Median, l.PS.Max = ms(50), ms(99), ms(1900) }, nil},
		{"ps stalls", func(l *HostLoad) { l.PS.Max = 27 * time.Second }, []string{"ps -e took up to 27s"}},
		{"python slow", func(l *HostLoad) { l.Python.Median = ms(120) }, []string{"python3 -c pass: median 120ms, over 2.00 ×"}},
		// The kernel took a fifth of the CPUs more than at the baseline:
		// 2 / (1 - 0.2) = 2.5 × the baseline's 50 ms.
		{"kernel's share allowed for", func(l *HostLoad) { l.Kernel, l.Python.Median = 0.2, ms(124) }, nil},
		{"slow beyond the kernel's share", func(l *HostLoad) { l.Kernel, l.Python.Median = 0.2, ms(126) },
			[]string{"over 2.50 ×", "the kernel's 20.0 % more"}},
		{"kernel's share at most a half", func(l *HostLoad) { l.Kernel, l.Python.Median = 0.9, ms(201) }, []string{"over 4.00 ×"}},
		{"kernel's share unknown", func(l *HostLoad) { l.Kernel, l.Python.Median = -1, ms(101) }, []string{"over 2.00 ×"}},
		// Each run cost 1.5 × its CPU time: 2 × 1.5 = 3 × the baseline's.
		{"a run's CPU time allowed for", func(l *HostLoad) { l.Python.CPU, l.Python.Median = ms(60), ms(149) }, nil},
		{"slow beyond a run's CPU time", func(l *HostLoad) { l.Python.CPU, l.Python.Median = ms(60), ms(151) },
			[]string{"over 3.00 ×", "CPU time 1.50 × the baseline's"}},
		{"a run's CPU time at most twice", func(l *HostLoad) { l.Python.CPU, l.Python.Median = ms(400), ms(201) }, []string{"over 4.00 ×"}},
		{"a run's CPU time less", func(l *HostLoad) { l.Python.CPU, l.Python.Median = ms(20), ms(101) }, []string{"over 2.00 ×"}},
		{"a run's CPU time unknown", func(l *HostLoad) { l.Python.CPU, l.Python.Median = 0, ms(101) }, []string{"over 2.00 ×"}},
		{"true slow", func(l *HostLoad) { l.True.P95 = ms(60) }, []string{"true: p95 60ms"}},
		{"timed out", func(l *HostLoad) { l.PS.TimedOut = 1 }, []string{"ps -e: 1 of 50 runs timed out"}},
		{"nothing measured", func(l *HostLoad) { l.PS = Sample{} }, []string{"ps -e: no run measured"}},
		{"every bound", func(l *HostLoad) { l.True.P95, l.Python.Median, l.PS.Max = time.Second, time.Second, 9*time.Second },
			[]string{"true:", "python3", "ps -e took"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := base
			tc.load(&l)
			err := l.Check(base, DefaultBounds())
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Check: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v, want it to say %q", err, w)
				}
			}
		})
	}
}

func TestKernelShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		k0, k kernelTicks
		want  float64
	}{
		{"a tenth", kernelTicks{kernel: 10, total: 1000}, kernelTicks{kernel: 30, total: 1200}, 0.1},
		{"none", kernelTicks{kernel: 10, total: 1000}, kernelTicks{kernel: 10, total: 1200}, 0},
		{"no time passed", kernelTicks{kernel: 10, total: 1000}, kernelTicks{kernel: 10, total: 1000}, -1},
		// A kernel thread that ended in between takes its ticks with it.
		{"fewer ticks", kernelTicks{kernel: 50, total: 1000}, kernelTicks{kernel: 10, total: 1200}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.share(tc.k0); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("share: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	quiet := HostLoad{
		True:   Sample{N: 50, Median: ms(1), P95: ms(2), Max: ms(3)},
		Python: Sample{N: 50, Median: ms(50), P95: ms(60), Max: ms(70)},
		PS:     Sample{N: 50, Median: ms(30), P95: ms(40), Max: ms(50)},
	}
	stalled := quiet
	stalled.PS = Sample{N: 2, TimedOut: 2, Median: 5 * time.Second, P95: 5 * time.Second, Max: 5 * time.Second}
	for _, tc := range []struct {
		name                  string
		before, during, after HostLoad
		busy, fails           bool
	}{
		{"responsive", quiet, quiet, quiet, false, false},
		{"stalled by the attack", quiet, stalled, quiet, false, true},
		{"busy before", stalled, stalled, quiet, true, true},
		{"slow baseline", func() HostLoad { l := quiet; l.PS.Max = 1500 * time.Millisecond; return l }(), quiet, quiet, true, true},
		{"still slow after", quiet, stalled, stalled, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Judge(tc.before, tc.during, tc.after, DefaultBounds())
			if (err != nil) != tc.fails || errors.Is(err, ErrBusyHost) != tc.busy {
				t.Errorf("Judge: %v; want an error %v, ErrBusyHost %v", err, tc.fails, tc.busy)
			}
		})
	}
}

// TestMeasureHost runs the probe for a moment on this host: every command
// measured, nothing timed out, and a timeout shows as one.
func TestMeasureHost(t *testing.T) {
	ctx := context.Background()
	l, err := MeasureHost(ctx, ProbeOptions{Duration: 500 * time.Millisecond})
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("host lacks: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle host: %s", l)
	if l.Kernel < 0 || l.Kernel > 1 {
		t.Errorf("the kernel's share: %v, want 0..1 (/proc is readable here)", l.Kernel)
	}
	for name, s := range map[string]Sample{"true": l.True, "python3": l.Python, "ps": l.PS} {
		if s.N == 0 || s.TimedOut > 0 || s.Median <= 0 || s.Max < s.P95 || s.P95 < s.Median {
			t.Errorf("%s: %s", name, s)
		}
	}
	if l.Python.CPU <= 0 || l.Python.CPU > l.Python.Max {
		t.Errorf("python3's CPU time: median %s, want above 0 and at most its longest run's %s", l.Python.CPU, l.Python.Max)
	}
	d, _, late, err := timeRun(ctx, 50*time.Millisecond, []string{"sleep", "5"})
	if err != nil || !late || d != 50*time.Millisecond {
		t.Errorf("sleep 5 with a 50 ms timeout: %s, timed out %v, %v", d, late, err)
	}
	if _, _, _, err := timeRun(ctx, time.Second, []string{"false"}); err == nil {
		t.Error("false: no error")
	}
}

// TestAttackMechanics drives StartAttack and Stop with a stand-in for
// AttackScript (a shell loop, no attack): started, stopped, usage read;
// a command that ends before it starts is an error.
func TestAttackMechanics(t *testing.T) {
	dir := t.TempDir()
	script := `touch "$1/started"; while [ ! -e "$1/stop" ]; do sleep 0.02; done; echo '{"cpu_seconds":1.5,"wall_seconds":3,"processes":700}' > "$1/usage"`
	a, err := StartAttack(exec.Command("sh", "-c", script, "sh", dir), dir, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	use, err := a.Stop()
	if err != nil || use != (AttackUsage{CPU: 1.5, Wall: 3, Processes: 700}) {
		t.Fatalf("Stop: %+v, %v", use, err)
	}
	if _, err := StartAttack(exec.Command("sh", "-c", "echo refused; exit 125"), t.TempDir(), 10*time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a command that ends at once: %v, want an error with its output", err)
	}
}

func TestAttackUsageCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		use  AttackUsage
		kind string
		ok   bool
	}{
		{"burner", AttackUsage{CPU: 8, Wall: 9}, "cpuburn", true},
		{"idle", AttackUsage{CPU: 1, Wall: 9}, "cpuburn", false},
		{"unknown", AttackUsage{CPU: -1, Wall: 9}, "cpuburn", false},
		{"bomb", AttackUsage{CPU: 8, Wall: 9, Processes: 1000}, "forkbomb", true},
		{"bomb that did not fill", AttackUsage{CPU: 8, Wall: 9, Processes: 100}, "forkbomb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.use.Check(tc.kind, 1024); (err == nil) != tc.ok {
				t.Errorf("Check: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestKillAttack: killAttack kills the attack's process groups from the
// host, not its controller, and counts their processes.
func TestKillAttack(t *testing.T) {
	py, err := lookSystem("python3")
	if err != nil {
		SkipHostLacks(t, "python3 for a stand-in attack: %v", err)
	}
	dir := t.TempDir()
	// The controller forks a group leader that forks one child, which
	// says the attack started; both sleep. The controller waits for the
	// leader and says how it ended.
	script := `
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        open(sys.argv[1] + '/started', 'w').close()
    time.sleep(60)
    os._exit(0)
_, st = os.waitpid(pid, 0)
print('leader', 'killed' if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9 else 'ended')
`
	a, err := StartAttack(exec.Command(py, "-c", script, dir), dir, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := killAttack(dir); n != 2 {
		t.Errorf("killAttack: %d processes, want 2 (the leader and its child)", n)
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	if a.waitErr != nil || strings.TrimSpace(a.Output()) != "leader killed" {
		t.Errorf("the controller: %v, said %q; want it alive, saying its leader was killed", a.waitErr, a.Output())
	}
}

func TestParseSigterm(t *testing.T) {
	for _, tc := range []struct {
		out       string
		rc, ms    int
		alive, ok bool
	}{
		{"rc=137 ms=5068\n", 137, 5068, false, true},
		{"alive\nrc=137 ms=30112\n", 137, 30112, true, true},
		{"rc=alive ms=1\n", 0, 0, false, false},
		{"", 0, 0, false, false},
	} {
		rc, ms, alive, err := ParseSigterm(tc.out)
		if (err == nil) != tc.ok || rc != tc.rc || ms != tc.ms || alive != tc.alive {
			t.Errorf("ParseSigterm(%q) = %d, %d, %v, %v; want %d, %d, %v, ok %v", tc.out, rc, ms, alive, err, tc.rc, tc.ms, tc.alive, tc.ok)
		}
	}
}
