package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/sodadclient"
	"github.com/soda-project/soda/internal/sodadclient/sodadtest"
)

// withBus points sodactl's system bus at a private one.
func withBus(t *testing.T, addr string) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
}

func outFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestRunModeWithoutSodad: without sodad on the bus, sodactl run builds
// the sandbox itself and says so (-v); --profile is then an error, 125.
// The runs stop at an unknown --mcp, after the mode is chosen and before
// any sandbox is built.
func TestRunModeWithoutSodad(t *testing.T) {
	f := newFixture(t)
	cd := "--config-dir=" + f.conf
	noBus := "unix:path=" + filepath.Join(t.TempDir(), "nobus")
	bus := sodadtest.StartBus(t, false)
	tests := []struct {
		name      string
		addr      string
		args      []string
		code      int
		stderrHas []string
	}{
		{"bus without sodad", bus, []string{"run", "-v", cd, "--mcp", "nosuch", "--", "true"}, 125,
			[]string{"sandbox mode: direct", "is not on the system bus", "no server \"nosuch\""}},
		{"no bus", noBus, []string{"run", "-v", cd, "--mcp", "nosuch", "--", "true"}, 125,
			[]string{"sandbox mode: direct", "no system bus to find sodad on", "no server \"nosuch\""}},
		{"--direct", bus, []string{"run", "-v", "--direct", cd, "--mcp", "nosuch", "--", "true"}, 125,
			[]string{"sandbox mode: direct", "why=--direct", "no server \"nosuch\""}},
		{"--profile without sodad", bus, []string{"run", "--profile", "dev", "--", "true"}, 125,
			[]string{"--profile dev: sodad (io.github.soda_project.Soda1) is not on the system bus; start or install sodad"}},
		{"--profile without a bus", noBus, []string{"run", "--profile", "dev", "--", "true"}, 125,
			[]string{"--profile dev: no system bus to find sodad on"}},
		{"--direct --profile", bus, []string{"run", "--direct", "--profile", "dev", "--", "true"}, 125,
			[]string{"--direct excludes --profile"}},
		{"bad profile name", bus, []string{"run", "--profile", "../x", "--", "true"}, 125, []string{"--profile: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withBus(t, tt.addr)
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "via sodad") {
				t.Errorf("sodad mode ran:\n%s", stderr.String())
			}
		})
	}
}

// TestRunViaSodad: with sodad on the bus the sandbox is its: the real
// stdio go as fds (what "the command" writes lands in sodactl's stdout),
// only the options given go in the spec, the exit status is the
// command's, and sodad's refusals are 125 with what to do.
func TestRunViaSodad(t *testing.T) {
	tests := []struct {
		name      string
		fake      *sodadtest.Fake
		args      []string
		code      int
		stderrHas []string
	}{
		{"exit status", &sodadtest.Fake{Exit: sodadclient.Exit{Result: "exit-code", Status: 7}},
			[]string{"run", "-v", "--profile", "dev", "--allow", "api.github.com:443", "--memory", "1G", "--rw", ".", "-C", ".", "--", "agent", "x"}, 7,
			[]string{"sandbox mode: sandbox via sodad", "sandbox=dev-1", "profile=dev"}},
		{"only profile", &sodadtest.Fake{Exit: sodadclient.Exit{Result: "success", Status: 0}},
			[]string{"run", "-v", "--", "agent"}, 0, []string{"sandbox via sodad", "profile=dev"}},
		{"signalled", &sodadtest.Fake{Exit: sodadclient.Exit{Result: "signal", Status: 137}},
			[]string{"run", "--", "agent"}, 137, nil},
		{"refused", &sodadtest.Fake{CreateError: sodadapi.ErrorExceedsProfile},
			[]string{"run", "--profile", "dev", "--memory", "64G", "--", "agent"}, 125,
			[]string{"create a sandbox from profile dev: refused by the fake (io.github.soda_project.Soda1.Error.ExceedsProfile): ask for no more than the profile allows"}},
		{"no such profile", &sodadtest.Fake{},
			[]string{"run", "--profile", "ops", "--", "agent"}, 125, []string{"no profile ops", "'sodactl sandbox profiles'"}},
		{"direct-only option", &sodadtest.Fake{},
			[]string{"run", "--profile", "dev", "--audit-json", "/tmp/x.json", "--allow-degraded", "idmap", "--", "agent"}, 125,
			[]string{"--audit-json, --allow-degraded: only with --direct"}},
		{"sodad lost it", &sodadtest.Fake{Exit: sodadclient.Exit{Result: "supervisor-lost", Status: -1}},
			[]string{"run", "--", "agent"}, 125, []string{"sodad lost it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := sodadtest.StartBus(t, false)
			fake := tt.fake
			fake.Profiles = []sodadclient.Profile{{Name: "dev"}}
			fake.Output = "from the sandbox\n"
			fake.Export(t, addr)
			withBus(t, addr)
			out := outFile(t)
			var stderr bytes.Buffer
			code := run(tt.args, out, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if tt.code == 125 && tt.name != "sodad lost it" {
				return
			}
			cr := fake.Creates()[0]
			if b, _ := os.ReadFile(out.Name()); string(b) != "from the sandbox\n" {
				t.Errorf("stdout holds %q: the fd passed was not sodactl's stdout", b)
			}
			if !cr.FDs["stdout"].Same(out) || !cr.FDs["stdin"].Same(os.Stdin) || !cr.FDs["stderr"].Same(os.Stderr) {
				t.Errorf("fds %+v are not sodactl's stdin, stdout, stderr", cr.FDs)
			}
			if tt.name == "exit status" {
				if cr.Profile != "dev" || strings.Join(cr.Argv, " ") != "agent x" {
					t.Errorf("created %s %q", cr.Profile, cr.Argv)
				}
				if _, ok := cr.Spec["MCP"]; ok {
					t.Errorf("spec has MCP without --mcp: %v", cr.Spec)
				}
				if cr.Spec["Allow"].String() != `["api.github.com:443"]` || cr.Spec["MemoryMax"].Value() != uint64(1<<30) {
					t.Errorf("spec %v", cr.Spec)
				}
				wd, _ := os.Getwd()
				if rw, _ := cr.Spec["ReadWritePaths"].Value().([]string); len(rw) != 1 || rw[0] != wd || cr.Spec["WorkingDirectory"].Value() != wd {
					t.Errorf("spec %v: want --rw . and -C . as %s", cr.Spec, wd)
				}
			}
		})
	}
}

// TestRunViaSodadSignals: a signal sodactl gets is forwarded with Kill,
// and the command's 128+signal is sodactl's exit status.
func TestRunViaSodadSignals(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, UntilKilled: true}
	fake.Export(t, addr)
	withBus(t, addr)
	go func() {
		select {
		case <-fake.CreatedCh():
			syscall.Kill(os.Getpid(), syscall.SIGHUP)
		case <-time.After(10 * time.Second):
		}
	}()
	var stderr bytes.Buffer
	code := run([]string{"run", "--", "agent"}, outFile(t), &stderr)
	if code != 128+int(syscall.SIGHUP) {
		t.Fatalf("exit %d, want %d; stderr %s", code, 128+int(syscall.SIGHUP), stderr.String())
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].Method != "Kill" || calls[0].Signal != int32(syscall.SIGHUP) {
		t.Errorf("calls %+v; want one Kill(SIGHUP)", calls)
	}
}

// TestSandboxCommands: sodactl sandbox against a fake sodad.
func TestSandboxCommands(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev", Description: "Developers"}}, UntilKilled: true,
		Audit: []string{`{"event":"connect","target":"api.github.com:443"}`}}
	fake.Export(t, addr)
	withBus(t, addr)
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "--", "agent"}, outFile(t), &bytes.Buffer{}) }()
	select {
	case <-fake.CreatedCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no sandbox created")
	}
	tests := []struct {
		name      string
		args      []string
		code      int
		stdoutHas []string
		stderrHas []string
	}{
		{"profiles", []string{"sandbox", "profiles"}, 0, []string{"PROFILE", "dev", "Developers"}, nil},
		{"profiles json", []string{"sandbox", "profiles", "--json"}, 0, []string{`"name": "dev"`}, nil},
		{"list", []string{"sandbox", "list"}, 0, []string{"ID", "dev-1", "dev", "running"}, nil},
		{"list json", []string{"sandbox", "list", "--json"}, 0, []string{`"id": "dev-1"`, `"state": "running"`}, nil},
		{"grant", []string{"sandbox", "grant", "dev-1", "pypi.org:443"}, 0, nil, nil},
		{"grant bad", []string{"sandbox", "grant", "dev-1", "pypi"}, 1, nil, []string{"InvalidTarget", "a target is HOST:PORT"}},
		{"status", []string{"sandbox", "status", "dev-1"}, 0, []string{"Sandbox:      dev-1", "State:", "running", "Allow:", "pypi.org:443", "MemoryMax=4294967296"}, nil},
		{"status json", []string{"sandbox", "status", "--json", "dev-1"}, 0, []string{`"exit_status": -1`, `"pypi.org:443"`}, nil},
		{"status unknown", []string{"sandbox", "status", "nosuch"}, 1, nil, []string{"look up sandbox nosuch: no sandbox nosuch (io.github.soda_project.Soda1.Error.NoSuchSandbox): 'sodactl sandbox list'"}},
		{"revoke", []string{"sandbox", "revoke", "dev-1", "pypi.org:443"}, 0, nil, nil},
		{"audit", []string{"sandbox", "audit", "dev-1"}, 0, []string{`{"event":"connect","target":"api.github.com:443"}`}, nil},
		{"bad signal", []string{"sandbox", "kill", "--signal", "FROB", "dev-1"}, 2, nil, []string{"unknown signal"}},
		{"flag for another command", []string{"sandbox", "kill", "--follow", "dev-1"}, 2, nil, []string{"--follow does not apply to kill"}},
		{"missing id", []string{"sandbox", "status"}, 2, nil, []string{"status takes 1 argument(s)"}},
		{"kill", []string{"sandbox", "kill", "--signal", "INT", "dev-1"}, 0, nil, nil},
		{"audit follow ends", []string{"sandbox", "audit", "--follow", "dev-1"}, 0, []string{"api.github.com:443"}, nil},
		{"help", []string{"sandbox", "--help"}, 0, []string{"sodactl sandbox audit [--follow] ID"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			for _, s := range tt.stdoutHas {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if strings.HasSuffix(tt.name, "json") && !json.Valid(stdout.Bytes()) {
				t.Errorf("not JSON: %s", stdout.String())
			}
		})
	}
	if code := <-done; code != 128+int(syscall.SIGINT) {
		t.Errorf("sodactl run exited %d after sandbox kill --signal INT; want %d", code, 128+int(syscall.SIGINT))
	}
}

// TestRunViaSodadTerminal: on a terminal sodactl passes the slave of a pty
// of its own, alone and interactive, relays what the command writes, and
// gives the pty the terminal's window size, at the start and on SIGWINCH.
func TestRunViaSodadTerminal(t *testing.T) {
	term, termSlave, err := sodadclient.OpenPTY()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer term.Close()
	defer termSlave.Close()
	setSize := func(rows, cols uint16) {
		if err := unix.IoctlSetWinsize(int(term.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			t.Fatal(err)
		}
	}
	setSize(33, 111)
	saved := os.Stdin
	os.Stdin = termSlave // sodactl's terminal
	defer func() { os.Stdin = saved }()

	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, UntilKilled: true, KeepTTY: true, Output: "on the pty\n"}
	fake.Export(t, addr)
	withBus(t, addr)
	out := outFile(t)
	done := make(chan int, 1)
	go func() { done <- run([]string{"run", "--", "agent"}, out, &bytes.Buffer{}) }()
	select {
	case <-fake.CreatedCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no sandbox created")
	}
	waitSize := func(rows, cols uint16) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, c, err := fake.TTYWinsize()
			if err == nil && r == rows && c == cols {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the command's pty is %dx%d (%v), want %dx%d", r, c, err, rows, cols)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSize(33, 111)
	setSize(44, 122)
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	waitSize(44, 122)
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if code := <-done; code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	cr := fake.Creates()[0]
	if fd, ok := cr.FDs["tty"]; !ok || !fd.Terminal || len(cr.FDs) != 1 || fd.Same(termSlave) {
		t.Errorf("fds %+v: want a pty of sodactl's own, alone", cr.FDs)
	}
	if cr.Spec["TTY"].Value() != true || cr.Options["interactive"].Value() != true {
		t.Errorf("spec %v options %v: want TTY and interactive", cr.Spec, cr.Options)
	}
	if b, _ := os.ReadFile(out.Name()); !strings.Contains(string(b), "on the pty") {
		t.Errorf("stdout holds %q", b)
	}
}

// TestRunDirectWhenSodadHasNothing: with sodad on the bus but no profile
// for the caller, or options only a direct run has and no --profile,
// sodactl run builds the sandbox itself (and says why) instead of failing:
// sodad only adds what the caller could not reach alone.
func TestRunDirectWhenSodadHasNothing(t *testing.T) {
	for _, tt := range []struct {
		name     string
		profiles []sodadclient.Profile
		args     []string
		why      string
	}{
		{"no profile", nil, []string{"run", "-v", "--", "agent"}, "sodad has no profile for you"},
		{"direct-only options", []sodadclient.Profile{{Name: "dev"}}, []string{"run", "-v", "--allow-degraded", "idmap", "--", "agent"}, "options only a direct run has: --allow-degraded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := sodadtest.StartBus(t, false)
			fake := &sodadtest.Fake{Profiles: tt.profiles}
			fake.Export(t, addr)
			withBus(t, addr)
			var stderr bytes.Buffer
			run(tt.args, outFile(t), &stderr)
			if !strings.Contains(stderr.String(), "sandbox mode: direct") || !strings.Contains(stderr.String(), tt.why) {
				t.Errorf("not a direct run for %q:\n%s", tt.why, stderr.String())
			}
			if n := len(fake.Creates()); n != 0 {
				t.Errorf("%d sandboxes created through sodad, want none", n)
			}
		})
	}
}
