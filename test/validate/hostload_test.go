package validate

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestHostResponsive: a validator run is a sandbox too; with the kind's
// default limits, a fork bomb or a CPU burner in it (a kind whose
// validator runs the file it is given: an operator's test runner) leaves
// the host responsive, measured on the host (testkit's probe) against a
// baseline taken just before. A control checks that the attack ran.
func TestHostResponsive(t *testing.T) {
	cs, _ := worker(t, "runner", "[Validator]\nExecStart=/bin/sh %FILES%\nEndOfOptions=\nFiles=*.sh\n[Limits]\nDeadline=14s\n")
	for _, kind := range []struct{ name, script string }{
		{"forkbomb", "python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'\n"},
		{"cpuburn", "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait\n"},
	} {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			base, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 3 * time.Second})
			if err != nil {
				t.Fatalf("baseline: %v", err)
			}
			var wg sync.WaitGroup
			var v verdict
			wg.Go(func() { v, _, _ = validate(t, cs, [2]string{"attack.sh", kind.script}) })
			time.Sleep(2 * time.Second)
			b0, t0 := cpuTicks(t)
			during, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 8 * time.Second})
			b1, t1 := cpuTicks(t)
			wg.Wait()
			if err != nil {
				t.Fatalf("during the attack: %v", err)
			}
			busy := float64(b1-b0) / float64(t1-t0) * float64(cpus(t))
			t.Logf("%s in a validator run (status %s): baseline %s\n  during (host CPUs busy %.2f): %s", kind.name, v.Status, base, busy, during)
			if busy < 0.8 {
				t.Fatalf("control: the host's CPUs were busy %.2f CPUs during the attack: it did not run", busy)
			}
			if err := during.Check(base, testkit.DefaultBounds()); err != nil {
				t.Error(err)
			}
		})
	}
}

// cpuTicks is the host's busy and total CPU time (/proc/stat), in ticks.
func cpuTicks(t *testing.T) (busy, total int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
	for i, v := range f {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

func cpus(t *testing.T) int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}
