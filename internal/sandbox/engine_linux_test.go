package sandbox

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNewChecksConfig: an engine is built only from a configuration that
// says what it needs; nothing missing is guessed from the process.
func TestNewChecksConfig(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name string
		cfg  Config
		want string // "" for success
	}{
		{"no cgroup manager", Config{Privileged: root}, "Config.Cgroups is not set"},
		{"unknown cgroup manager", Config{Privileged: root, Cgroups: "cgmanager"}, `unknown Config.Cgroups "cgmanager"`},
		{"privilege that is not there", Config{Privileged: !root, Cgroups: CgroupDirect}, map[bool]string{true: "as root the engine must be privileged", false: "needs root"}[root]},
		{"negative uid range", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: -5, Count: 3, LockDir: "/x"}}, "bad uid range"},
		{"uid range past 2^31", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: 1 << 30, Count: 1 << 30, LockDir: "/x"}}, "bad uid range"},
		{"uid range without lock dir", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: 5000000, Count: 3}}, "bad uid range"},
		{"defaults", Config{Privileged: root, Cgroups: CgroupDirect}, ""},
		{"systemd", Config{Privileged: root, Cgroups: CgroupSystemd}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.InitPath = testInitPath
			e, err := New(tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer e.Close()
				if e.cfg.UIDs != DefaultUIDs || e.cfg.Log == nil {
					t.Errorf("defaults not filled: %+v", e.cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
			}
		})
	}
}

// TestClosedNetworkEngine: an engine configured closed refuses a spec that
// would relay egress, before anything is created.
func TestClosedNetworkEngine(t *testing.T) {
	e := testEngine(t, func(c *Config) { c.ClosedNetwork = true })
	_, err := e.Start(t.Context(), Spec{Argv: []string{"true"}, Home: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "closed-network sandboxes only") {
		t.Fatalf("Start with egress on a closed engine: %v", err)
	}
}

// fillTasks is a python3 program that forks sleeping children until a
// fork fails, says "full" and sleeps.
const fillTasks = `import os, sys, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(100)
            os._exit(0)
    except OSError:
        break
print("full", flush=True)
time.sleep(100)`

// TestStop: a daemon ends a sandbox it does not wait on itself. Stop
// makes the waiter's Wait return: SIGTERM for a command that honours it,
// SIGKILL to the whole cgroup after the grace period for one that does
// not (and for what it forked into the background).
func TestStop(t *testing.T) {
	requireNamespaces(t)
	tests := []struct {
		name     string
		script   string
		wantCode int
		minWait  time.Duration
	}{
		{"honours SIGTERM", "sleep 60", 128 + 15, 0},
		{"ignores SIGTERM", "trap '' TERM; (trap '' TERM; sleep 61) & sleep 62", 128 + 9, StopGrace},
		// Every task the limit allows taken: init still has the threads
		// to take the signal (before, it aborted with "failed to create
		// new OS thread" and the run ended with status 2).
		{"holds its task limit", "exec python3 -c '" + fillTasks + "'", 128 + 15, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, nil)
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer outR.Close()
			sb, err := e.Start(t.Context(), Spec{Argv: []string{"/bin/sh", "-c", "echo up; " + tc.script}, Home: t.TempDir(),
				Stdout: outW, AllowDegraded: []Layer{LayerCgroup}, Limits: Limits{TasksMax: 32}})
			outW.Close()
			if err != nil {
				t.Fatal(err)
			}
			out := bufio.NewReader(outR)
			if line, err := out.ReadString('\n'); line != "up\n" {
				t.Fatalf("the command's first line: %q, %v", line, err)
			}
			if strings.Contains(tc.script, fillTasks) {
				_ = outR.SetReadDeadline(time.Now().Add(20 * time.Second))
				if line, err := out.ReadString('\n'); line != "full\n" {
					t.Fatalf("the command did not fill its task limit: %q, %v", line, err)
				}
			}
			time.Sleep(200 * time.Millisecond) // the shell has set its traps
			start := time.Now()
			sb.Stop()
			sb.Stop() // twice is harmless
			st, err := sb.Wait(t.Context())
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if st.Code != tc.wantCode {
				t.Errorf("exit %+v, want code %d", st, tc.wantCode)
			}
			if took < tc.minWait || took > StopGrace+5*time.Second {
				t.Errorf("stopped in %v, want between %v and %v", took, tc.minWait, StopGrace+5*time.Second)
			}
			sb.Stop() // after the end: nothing
		})
	}
}
