package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// attack is the fork loop, or 8 busy loops, run in the
// foreground of a call (its time-out then ends it and, with it,
// everything it started).
func attack(kind string) string {
	if kind == "forkbomb" {
		return "python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'"
	}
	return "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait"
}

// TestHostResponsive: a fork bomb and a CPU burner in a session's exec,
// and in an isolated child, leave the host responsive (issue 23: a fork
// loop in a session made the host's ps -e take 4 s, 60 s with two, and
// python3 start 3 times slower). The host is measured (testkit's probe:
// true, python3, ps -e on the host) against baselines taken just before
// and after (testkit.Judge); a control checks that the attack ran (the
// host's CPUs busy). Before the fix, the fork bomb made ps -e time out
// at 5 s in both kinds; the CPU burner left the host responsive then too
// (a regression guard).
func TestHostResponsive(t *testing.T) {
	testkit.RequireHostLoad(t)
	cs, _ := server(t, "--exec-timeout", "30s")
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("attack.sh", "")}})
	id := r.SandboxID
	for _, where := range []string{"exec", "isolated"} {
		for _, kind := range []string{"forkbomb", "cpuburn"} {
			t.Run(where+"/"+kind, func(t *testing.T) {
				var wg sync.WaitGroup
				run, err := testkit.HostUnderAttack(context.Background(), 2*time.Second, 8*time.Second, func() {
					wg.Go(func() {
						if where == "exec" {
							call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": attack(kind), "timeout_seconds": 12})
						} else {
							call(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "attack.sh", "isolated": true,
								"files": []any{file("attack.sh", attack(kind)+"\n")}, "timeout_seconds": 12})
						}
					})
				}, wg.Wait)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s %s in a session (host CPUs busy %.2f):\n  before %s\n  during %s\n  after  %s", where, kind, run.BusyCPUs, run.Before, run.During, run.After)
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
}
