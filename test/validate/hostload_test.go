package validate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestHostResponsive: a validator run is a sandbox too; with the kind's
// default limits, a fork bomb or a CPU burner in it (a kind whose
// validator runs the file it is given: an operator's test runner) leaves
// the host responsive, measured on the host (testkit's probe) against
// baselines taken just before and after (testkit.Judge). A control checks
// that the attack ran (the host's CPUs busy).
func TestHostResponsive(t *testing.T) {
	testkit.RequireHostLoad(t)
	cs, _ := worker(t, "runner", "[Validator]\nExecStart=/bin/sh %FILES%\nEndOfOptions=\nFiles=*.sh\n[Limits]\nDeadline=12s\n")
	for _, kind := range []struct{ name, script string }{
		{"forkbomb", "python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'\n"},
		{"cpuburn", "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait\n"},
	} {
		t.Run(kind.name, func(t *testing.T) {
			var wg sync.WaitGroup
			var v verdict
			run, err := testkit.HostUnderAttack(context.Background(), 2*time.Second, 8*time.Second, func() {
				wg.Go(func() { v, _, _ = validate(t, cs, [2]string{"attack.sh", kind.script}) })
			}, wg.Wait)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s in a validator run (status %s; host CPUs busy %.2f):\n  before %s\n  during %s\n  after  %s", kind.name, v.Status, run.BusyCPUs, run.Before, run.During, run.After)
			verdict := testkit.Judge(run.Before, run.During, run.After, testkit.DefaultBounds())
			if errors.Is(verdict, testkit.ErrBusyHost) {
				t.Skipf("host lacks: %v", verdict)
			}
			if run.BusyCPUs < 0.8 {
				t.Fatalf("control: the host's CPUs were busy %.2f CPUs during the attack: it did not run", run.BusyCPUs)
			}
			if verdict != nil {
				t.Error(verdict)
			}
		})
	}
}
