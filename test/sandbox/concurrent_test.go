package sandboxtest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serviceSeq numbers the transient services of the concurrency tests.
var serviceSeq atomic.Int64

// inService runs script in a transient system service of its own (as a CI
// runner or any service that runs agents would) and returns its output.
func (e *env) inService(t *testing.T, script string, timeout time.Duration) result {
	t.Helper()
	unit := fmt.Sprintf("soda-test-conc-%d.service", serviceSeq.Add(1))
	return e.exec(execOpts{timeout: timeout}, "systemd-run", "--quiet", "--wait", "--pipe", "--unit", unit,
		"-p", "StandardError=journal", "sh", "-c", script)
}

// sodactlLine is "sodactl run" with the test's configuration directory.
func (e *env) sodactlLine() string {
	return filepath.Join(e.bin, "sodactl") + " run --config-dir " + filepath.Join(e.bin, "mcp")
}

// concurrentScript starts n sandboxes at once from one shell, sandbox i
// with its own limits (MemoryMax 100+i MiB, TasksMax 50+i), each reading
// them from its cgroup and sleeping hold seconds; it prints one line
// "i exit=CODE mem=BYTES pids=N" per sandbox and the wall time.
func (e *env) concurrentScript(n int, hold string) string {
	var b strings.Builder
	b.WriteString("d=$(mktemp -d); start=$(date +%s%N)\n")
	fmt.Fprintf(&b, "for i in $(seq 0 %d); do\n", n-1)
	fmt.Fprintf(&b, "  ( %s --memory $((100+i))M --tasks $((50+i)) -- sh -c 'echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max) pids=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max); sleep %s' > $d/$i.out 2> $d/$i.err; echo $? > $d/$i.rc ) &\n", e.sodactlLine(), hold)
	b.WriteString("done\nwait\nend=$(date +%s%N)\n")
	fmt.Fprintf(&b, "for i in $(seq 0 %d); do echo \"$i exit=$(cat $d/$i.rc) $(cat $d/$i.out)\"; [ \"$(cat $d/$i.rc)\" = 0 ] || sed \"s/^/$i stderr: /\" $d/$i.err; done\n", n-1)
	b.WriteString("echo wall_ms=$(( (end-start)/1000000 ))\nrm -rf $d\n")
	return b.String()
}

var concLine = regexp.MustCompile(`(?m)^(\d+) exit=(\d+) mem=(\d+) pids=(\d+)$`)

// checkConcurrent checks that each of n sandboxes of concurrentScript
// ended with 0 under its own limits, and returns the wall time.
func checkConcurrent(t *testing.T, r result, n int) time.Duration {
	t.Helper()
	seen := map[int]bool{}
	for _, m := range concLine.FindAllStringSubmatch(r.stdout, -1) {
		i, _ := strconv.Atoi(m[1])
		seen[i] = true
		if m[2] != "0" {
			t.Errorf("sandbox %d: exit %s", i, m[2])
		}
		if want := strconv.Itoa((100 + i) << 20); m[3] != want {
			t.Errorf("sandbox %d: memory limit %s, want its own %s", i, m[3], want)
		}
		if want := strconv.Itoa(50 + i); m[4] != want {
			t.Errorf("sandbox %d: tasks limit %s, want its own %s", i, m[4], want)
		}
	}
	if len(seen) != n || t.Failed() {
		t.Errorf("%d of %d sandboxes completed with their own limits:\n%s", len(seen), n, r)
	}
	var wall time.Duration
	if m := regexp.MustCompile(`wall_ms=(\d+)`).FindStringSubmatch(r.stdout); m != nil {
		ms, _ := strconv.Atoi(m[1])
		wall = time.Duration(ms) * time.Millisecond
	}
	return wall
}

// TestConcurrentSandboxes: sandboxes started at once as root from one
// systemd service (each sodactl run a process of the same service) each
// run to completion under their own limits, and the end or the start of
// one never ends another. Before the fix, every sodactl run stopped every
// soda-sandbox scope whose StopPropagatedFrom named its service, that is
// each sibling's.
func TestConcurrentSandboxes(t *testing.T) {
	e := requireEnv(t)
	t.Run("service/short-does-not-end-long", func(t *testing.T) {
		script := strings.Join([]string{
			"d=$(mktemp -d)",
			e.sodactlLine() + " --memory 200M --tasks 60 -- sh -c 'sleep 4; echo long-done' > $d/long.out 2>&1 & long=$!",
			// The long one's scope is up before the short one starts.
			"for i in $(seq 100); do systemctl list-units --plain --no-legend --state active 'soda-sandbox-*.scope' | grep -q . && break; sleep 0.1; done",
			e.sodactlLine() + " -- true; echo short=$?",
			"wait $long; echo long=$?",
			"cat $d/long.out; rm -rf $d",
		}, "\n")
		r := e.inService(t, script, 60*time.Second)
		if r.err != nil || !strings.Contains(r.stdout, "short=0\n") || !strings.Contains(r.stdout, "long=0\n") || !strings.Contains(r.stdout, "long-done\n") {
			t.Fatalf("a short sandbox's start or end ended a long one of the same service:\n%s", r)
		}
		e.noLeftovers(t)
	})
	// From one process (one engine, one placer), as a daemon runs them:
	// directly, and as the main process of a service.
	conc := filepath.Join(e.bin, "sbxconc")
	for _, where := range []string{"process", "service-process"} {
		run := func(t *testing.T, args ...string) result {
			if where == "process" {
				return e.exec(execOpts{timeout: 180 * time.Second}, append([]string{conc}, args...)...)
			}
			return e.inService(t, conc+" "+strings.Join(args, " "), 180*time.Second)
		}
		t.Run(where+"/short-does-not-end-long", func(t *testing.T) {
			r := run(t, "short-long")
			if r.err != nil || !strings.Contains(r.stdout, "short=0\n") || !strings.Contains(r.stdout, "long=0\nlong-done\n") {
				t.Fatalf("a short sandbox's start or end ended a long one of the same process:\n%s", r)
			}
			e.noLeftovers(t)
		})
		for _, n := range []int{2, 20} {
			t.Run(fmt.Sprintf("%s/%d", where, n), func(t *testing.T) {
				r := run(t, strconv.Itoa(n), "2")
				if r.err != nil {
					t.Errorf("sbxconc: %v", r.err)
				}
				wall := checkConcurrent(t, r, n)
				t.Logf("%d sandboxes started at once from one process (%s) all finished in %s (each sleeps 2s)", n, where, wall)
				e.noLeftovers(t)
			})
		}
	}
	// A scope whose owner was killed (its lock file is there, no process
	// holds it) is stopped by the next sandbox; one with no lock file (an
	// owner that could not write one, an older soda) is not judged.
	t.Run("leftover-of-killed-owner", func(t *testing.T) {
		script := strings.Join([]string{
			"mkdir -p /run/soda/scopes && : > /run/soda/scopes/soda-sandbox-deadowner.scope.lock",
			"systemd-run --quiet --scope --unit soda-sandbox-deadowner.scope --slice soda-sandbox.slice sleep 1000 > /dev/null 2>&1 &",
			"systemd-run --quiet --scope --unit soda-sandbox-nolock.scope --slice soda-sandbox.slice sleep 1000 > /dev/null 2>&1 &",
			"for i in $(seq 100); do [ $(systemctl list-units --plain --no-legend --state active 'soda-sandbox-*lock.scope' 'soda-sandbox-deadowner.scope' | wc -l) = 2 ] && break; sleep 0.1; done",
			e.sodactlLine() + " -- true; echo run=$?",
			"echo deadowner=$(systemctl is-active soda-sandbox-deadowner.scope) nolock=$(systemctl is-active soda-sandbox-nolock.scope)",
			"ls /run/soda/scopes",
			"systemctl stop soda-sandbox-nolock.scope",
		}, "\n")
		r := e.exec(execOpts{}, "sh", "-c", script)
		if !strings.Contains(r.stdout, "run=0\n") || !strings.Contains(r.stdout, "deadowner=inactive nolock=active\n") {
			t.Errorf("the killed owner's scope was not swept, or the one without a lock was:\n%s", r)
		}
		if strings.Contains(r.stdout, "deadowner.scope.lock") {
			t.Errorf("the swept scope's lock file is left:\n%s", r)
		}
		e.noLeftovers(t)
	})
	for _, n := range []int{2, 20} {
		t.Run(fmt.Sprintf("service/%d", n), func(t *testing.T) {
			r := e.inService(t, e.concurrentScript(n, "2"), 180*time.Second)
			if r.err != nil {
				t.Errorf("service: %v", r.err)
			}
			wall := checkConcurrent(t, r, n)
			t.Logf("%d sandboxes started at once from one service all finished in %s (each sleeps 2s)", n, wall)
			e.noLeftovers(t)
		})
	}
}
