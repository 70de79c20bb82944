package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
)

// gateArg0 is the gate's argv[0] (internal/cgroup, gate_linux.go).
const gateArg0 = "soda-child-gate"

// gatedPlacer gives each child a process group behind a gate that the test
// opens (or abandons) by hand, to test the gate without systemd.
type gatedPlacer struct {
	groups      chan *gatedGroup
	startErr    error  // returned by started
	replacePath string // replaces the real command's path after wrapping
	notGate     bool   // start /bin/true instead of the gate
}

func (p *gatedPlacer) Mode() string { return "test-gate" }

func (p *gatedPlacer) Unenforced() []string { return nil }

func (p *gatedPlacer) NewGroup(string) (cgroup.Group, error) {
	pg, err := cgroup.NewProcessGroupPlacer().NewGroup("")
	if err != nil {
		return nil, err
	}
	g := &gatedGroup{Group: pg, p: p}
	p.groups <- g
	return g, nil
}

type gatedGroup struct {
	cgroup.Group // a process group
	p            *gatedPlacer
	gate         cgroup.Gate
	pgid         int // the process group's, once Started
}

func (g *gatedGroup) Prepare(cmd *exec.Cmd) error {
	if err := g.gate.Wrap(cmd); err != nil {
		return err
	}
	if g.p.replacePath != "" {
		cmd.Args[1] = g.p.replacePath
	}
	if g.p.notGate {
		cmd.Path, cmd.Args = "/bin/true", []string{"true"}
	}
	return nil
}

func (g *gatedGroup) Started(ctx context.Context, pid int) error {
	g.gate.Started()
	if err := g.Group.Started(ctx, pid); err != nil {
		return err
	}
	g.pgid = pid
	if g.p.startErr != nil {
		return g.p.startErr
	}
	return g.gate.WaitReady(time.Now().Add(10 * time.Second))
}

func (g *gatedGroup) Release() error {
	g.gate.Close()
	return nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func startGated(t *testing.T, p *gatedPlacer, spec Spec) (*Process, *gatedGroup) {
	t.Helper()
	p.groups = make(chan *gatedGroup, 1)
	proc, err := Start(context.Background(), testLogger(t), p, "gatetest", spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return proc, <-p.groups
}

func cmdline(pid int) []string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

func waitExit(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("child did not exit")
	}
}

// exitCode is the exit code of p once it has exited: 0, the code of a
// non-zero exit, or -1 when it did not exit by itself.
func exitCode(p *Process) int {
	err := p.waitErr
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// TestGateExecsAfterOpen: the child is the gate until the gate opens, then
// it is the real command with the real argv and env, minus the marker.
func TestGateExecsAfterOpen(t *testing.T) {
	for _, sup := range []bool{false, true} {
		t.Run(fmt.Sprintf("supervised=%v", sup), func(t *testing.T) { testGateExecsAfterOpen(t, sup) })
	}
}

func testGateExecsAfterOpen(t *testing.T, supervise bool) {
	p := &gatedPlacer{}
	proc, g := startGated(t, p, Spec{
		Argv:      []string{"sh", "-c", `echo "$0|$1|$FOO|${SODA_CHILD_GATE-unset}|${SODA_CHILD_SUPERVISOR-unset}"`, "zero", "one"},
		Env:       []string{"FOO=bar"},
		Supervise: supervise,
	})
	defer proc.Stop(Grace{})
	args := cmdline(proc.Pid())
	if len(args) < 3 || args[0] != gateArg0 || !strings.HasSuffix(args[1], "/sh") || args[2] != "sh" {
		t.Fatalf("before the gate opens the child should be the gate, cmdline %q", args)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-proc.Exited():
		t.Fatalf("gate exited before it was opened: %s", proc.ExitStatus())
	default:
	}
	if err := g.gate.Open(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(proc.Stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read child stdout: %v", err)
	}
	if want := "zero|one|bar|unset|unset\n"; line != want {
		t.Errorf("child printed %q, want %q", line, want)
	}
	waitExit(t, proc)
	if code := exitCode(proc); code != 0 {
		t.Errorf("exit %s", proc.ExitStatus())
	}
}

// TestGateParentGone: a gate whose pipe closes without the go byte never
// runs the real command.
func TestGateParentGone(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	p := &gatedPlacer{}
	proc, g := startGated(t, p, Spec{Argv: []string{"touch", marker}})
	defer proc.Stop(Grace{})
	g.gate.Close()
	waitExit(t, proc)
	if code := exitCode(proc); code != GateExitCode {
		t.Errorf("gate exit %s, want %d", proc.ExitStatus(), GateExitCode)
	}
	msg, _ := io.ReadAll(proc.Stderr)
	if !strings.Contains(string(msg), "parent went away") {
		t.Errorf("stderr %q lacks the reason", msg)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the real command ran although the gate was never opened")
	}
}

// TestGateExecFailure: an exec error is reported on stderr with status 127.
func TestGateExecFailure(t *testing.T) {
	p := &gatedPlacer{replacePath: "/nonexistent/soda-test-cmd"}
	proc, g := startGated(t, p, Spec{Argv: []string{"true"}})
	defer proc.Stop(Grace{})
	if err := g.gate.Open(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, proc)
	if code := exitCode(proc); code != GateExitCode {
		t.Errorf("gate exit %s, want %d", proc.ExitStatus(), GateExitCode)
	}
	msg, _ := io.ReadAll(proc.Stderr)
	if !strings.Contains(string(msg), "exec /nonexistent/soda-test-cmd") {
		t.Errorf("stderr %q lacks the exec error", msg)
	}
}

// TestStartPlacementFailure: when placement fails, Start returns an error
// and the gate is killed and reaped, the real command never runs.
func TestStartPlacementFailure(t *testing.T) {
	for _, sup := range []bool{false, true} {
		t.Run(fmt.Sprintf("supervised=%v", sup), func(t *testing.T) { testStartPlacementFailure(t, sup) })
	}
}

func testStartPlacementFailure(t *testing.T, supervise bool) {
	marker := filepath.Join(t.TempDir(), "ran")
	p := &gatedPlacer{startErr: errors.New("no room"), groups: make(chan *gatedGroup, 1)}
	_, err := Start(context.Background(), testLogger(t), p, "gatetest", Spec{Argv: []string{"touch", marker}, Supervise: supervise})
	if err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("Start error %v, want the placement error", err)
	}
	g := <-p.groups
	if g.pgid == 0 {
		t.Fatal("group never saw a pid")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(g.pgid)); err == nil {
		t.Errorf("gate pid %d still exists", g.pgid)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Error("the real command ran although placement failed")
	}
}

// TestStartGateNeverReady: a gate that dies before it is ready fails Start.
func TestStartGateNeverReady(t *testing.T) {
	p := &gatedPlacer{notGate: true, groups: make(chan *gatedGroup, 1)}
	_, err := Start(context.Background(), testLogger(t), p, "gatetest", Spec{Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("Start error %v, want the gate's early exit", err)
	}
}
