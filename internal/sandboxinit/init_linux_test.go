package sandboxinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// TestMain lets the test binary play soda-sandbox-init.
func TestMain(m *testing.M) {
	if IsInit() {
		Main()
	}
	os.Exit(m.Run())
}

// TestInitRefusesOtherProtocolVersion: a configuration from a host of
// another build is refused on the status pipe (exit 125) before init does
// anything else. Control: the same binary, started the same way, reads
// and answers the configuration (so the refusal is the version's). Init
// runs in namespaces of its own, as a sandbox's does: should it go on past
// the check, it names and mounts nothing of the host's.
func TestInitRefusesOtherProtocolVersion(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(cfg string) (wire.Status, int) {
		t.Helper()
		cfgR, cfgW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		statR, statW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		cmd := &exec.Cmd{Path: exe, Args: []string{wire.InitArg0}, Env: []string{wire.RoleEnv + "=" + wire.RoleInit, wire.FDsEnv + "=3,4,5,6"},
			ExtraFiles: []*os.File{cfgR, statW, null, null}, Stderr: os.Stderr,
			SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWPID}}
		if os.Geteuid() != 0 {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		}
		if err := cmd.Start(); err != nil {
			t.Skipf("host lacks: cannot start init in namespaces of its own: %v", err)
		}
		cfgR.Close()
		statW.Close()
		if _, err := cfgW.WriteString(cfg + "\n"); err != nil {
			t.Fatal(err)
		}
		var st wire.Status
		line, err := bufio.NewReader(statR).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &st)
		}
		if err != nil {
			t.Errorf("status line %q: %v", line, err)
		}
		cfgW.Close() // the placement verdict init waits for before it exits
		statR.Close()
		werr := cmd.Wait()
		var ee *exec.ExitError
		if werr != nil && !errors.As(werr, &ee) {
			t.Fatal(werr)
		}
		return st, cmd.ProcessState.ExitCode()
	}
	// Control: not JSON at all, the same path up to the check.
	if st, code := run("not json"); code != 125 || !strings.Contains(st.Error, "read sandbox configuration") {
		t.Fatalf("control: %+v exit %d, want a configuration error and 125", st, code)
	}
	st, code := run(`{"version":0,"id":"sbx-x"}`)
	if code != 125 || !strings.Contains(st.Error, "protocol version 0") || !strings.Contains(st.Error, "different builds") {
		t.Errorf("version 0: %+v exit %d, want a protocol version refusal and 125", st, code)
	}
}

// TestIsInitNeedsBothMarkers: argv[0] or the role variable alone does not
// make a process an init.
func TestIsInitNeedsBothMarkers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		arg0 string
		env  []string
	}{
		{wire.InitArg0, nil},
		{exe, []string{wire.RoleEnv + "=" + wire.RoleInit}},
		{wire.HoldArg0, []string{wire.RoleEnv + "=" + wire.RoleInit}},
	} {
		cmd := &exec.Cmd{Path: exe, Args: []string{tt.arg0, "-test.run=^TestNothing$"}, Env: tt.env}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "no tests to run") {
			t.Errorf("argv0 %s env %v: %v %s, want the test binary itself", tt.arg0, tt.env, err, out)
		}
	}
}

// TestSparesFor: a live sandbox's init reserves more idle threads than a
// one-command one, and never more than a quarter of what the task limit
// leaves beside init's own threads.
func TestSparesFor(t *testing.T) {
	own := threads(os.Getpid())
	if own < 1 {
		t.Fatalf("threads of the test process: %d, want at least 1", own)
	}
	tests := []struct {
		name       string
		persistent bool
		nproc      uint64
		want       int
	}{
		{"run, no task limit", false, 0, runSpareThreads},
		{"live, no task limit", true, 0, spareThreads},
		{"live, the default 1024", true, 1024, spareThreads},
		// Up to 3 threads more than own when sparesFor counts them (the
		// runtime may start some meanwhile): 8 to 11 left, and 4 to 7.
		{"run, room for 2", false, uint64(own + 11), 2},
		{"live, room for 1", true, uint64(own + 7), 1},
		{"run, no room", false, uint64(own), 0},
		{"run, under init's threads", false, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config{}
			cfg.Persistent, cfg.NProc = tc.persistent, tc.nproc
			if got := sparesFor(&cfg); got != tc.want {
				t.Errorf("sparesFor(persistent %v, NProc %d) with %d threads = %d, want %d", tc.persistent, tc.nproc, own, got, tc.want)
			}
		})
	}
}
