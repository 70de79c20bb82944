package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// The gate closes the window between fork and placement. A placer that can
// only move a process after it exists (a systemd scope takes PIDs) starts
// the soda binary itself as a "gate" instead of the real command: the gate
// blocks on a socket until the parent has placed it, and only then execs
// the real command. Nothing the real command does, not even its first
// instruction, runs outside the group.
//
// The gate is recognised by two markers together, so that neither alone
// (an inherited variable, a renamed binary) turns a process into one:
// argv[0] is gateArg0 and the environment has gateEnv=1. argv[1] is the
// path of the real command (resolved by the parent), argv[2:] its argv.
//
// Protocol on fd gateFD (one end of a Unix socketpair): the gate writes
// gateReady once its runtime is up and it is about to block; the parent
// places it only then, and writes gateGo to release it. End of file (the
// parent gave up or died) makes the gate exit without exec. Placing the
// gate only after gateReady keeps the Go runtime from creating threads
// inside the group, where a small TasksMax (which counts threads) could
// make that fail and crash the gate.
const (
	gateArg0  = "soda-child-gate"
	gateEnv   = "SODA_CHILD_GATE"
	gateFD    = 3
	gateReady = 'R'
	gateGo    = 'G'
	// GateExitCode is the exit status of a gate that did not exec the real
	// command: the parent went away, or the exec failed. It matches the
	// shell's "command not found or not executable".
	GateExitCode = 127
)

// IsGate reports whether this process was started as a child gate. A
// program that starts children through a placer that needs the gate (see
// NewSystemdPlacer) must check this first thing in main and call RunGate.
// Programs that start children through internal/child call child.IsGate
// and child.RunGate instead, which also cover its supervisor (the program
// re-executed in the same way):
//
//	func main() {
//		if child.IsGate() {
//			child.RunGate()
//		}
//		...
//	}
func IsGate() bool {
	return len(os.Args) > 0 && os.Args[0] == gateArg0 && os.Getenv(gateEnv) == "1"
}

// RunGate waits until the parent has placed this process in its group and
// then replaces it with the real command. It never returns: on any failure
// (parent gone before releasing the gate, bad arguments, exec error) it
// writes one line to stderr and exits with GateExitCode.
func RunGate() {
	err := runGate(os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: %v\n", gateArg0, err)
	os.Exit(GateExitCode)
}

// runGate returns only on failure.
func runGate(args, env []string) error {
	if len(args) < 3 {
		return errors.New("no command to run (this program is started by soda, not by hand)")
	}
	path, argv := args[1], args[2:]
	if err := syscall.Sendto(gateFD, []byte{gateReady}, syscall.MSG_NOSIGNAL, nil); err != nil {
		return fmt.Errorf("signal readiness on fd %d: %w; not starting %s", gateFD, err, path)
	}
	// Block in a raw read on a locked thread: the runtime does not see a
	// syscall, so it does not hand the P off and start another thread to
	// poll the network, which could fail once the gate is in its group.
	runtime.LockOSThread()
	var b [1]byte
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, gateFD, uintptr(unsafe.Pointer(&b[0])), 1)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return fmt.Errorf("read fd %d: %w; not starting %s", gateFD, errno, path)
		}
		if n == 0 {
			return fmt.Errorf("parent went away before placing the child; not starting %s", path)
		}
		break
	}
	if b[0] != gateGo {
		return fmt.Errorf("unexpected byte %#x on fd %d; not starting %s", b[0], gateFD, path)
	}
	syscall.Close(gateFD)
	err := syscall.Exec(path, argv, gateStripEnv(env))
	return fmt.Errorf("exec %s: %w", path, err)
}

// gateStripEnv removes the gate's marker so the real command does not see it.
func gateStripEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, gateEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Gate is the parent's side of a child gate, for a Group that places its
// child after the fork: Wrap in Prepare; in Started, Started once the child
// has a pid, WaitReady before placing it and Open once it is placed; Close
// in Release. The zero Gate is ready to Wrap.
type Gate struct {
	child  *os.File // the gate's end, open until the gate has started
	parent *os.File // ours
}

// Wrap rewrites cmd so that it starts the gate, which will exec the command
// cmd described. cmd must not have ExtraFiles (the gate's socket is fd 3).
func (g *Gate) Wrap(cmd *exec.Cmd) error {
	if len(cmd.ExtraFiles) > 0 {
		return errors.New("child gate: command already has extra files")
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("child gate socketpair: %w", err)
	}
	// Non-blocking, so that os.File polls it and read deadlines work.
	if err := syscall.SetNonblock(fds[1], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return fmt.Errorf("child gate socketpair: %w", err)
	}
	g.child = os.NewFile(uintptr(fds[0]), "child-gate")
	g.parent = os.NewFile(uintptr(fds[1]), "child-gate-parent")
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(gateStripEnv(env), gateEnv+"=1")
	cmd.Args = append([]string{gateArg0, cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	cmd.ExtraFiles = []*os.File{g.child}
	return nil
}

// Started drops the parent's copy of the gate's end, so that the gate sees
// end of file if the parent closes its end or dies.
func (g *Gate) Started() {
	if g.child != nil {
		g.child.Close()
		g.child = nil
	}
}

// WaitReady waits until the gate says it is up and blocked.
func (g *Gate) WaitReady(deadline time.Time) error {
	if g.parent == nil {
		return errors.New("child gate: already closed")
	}
	if err := g.parent.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("child gate: set deadline: %w", err)
	}
	var b [1]byte
	n, err := g.parent.Read(b[:])
	switch {
	case err == io.EOF || (err == nil && n == 0):
		return errors.New("child gate exited before it was ready (see its stderr)")
	case err != nil:
		return fmt.Errorf("child gate: wait for readiness: %w", err)
	case b[0] != gateReady:
		return fmt.Errorf("child gate: unexpected byte %#x", b[0])
	}
	return nil
}

// Open releases the gate: the child execs the real command.
func (g *Gate) Open() error {
	if g.parent == nil {
		return errors.New("child gate: already closed")
	}
	_, err := g.parent.Write([]byte{gateGo})
	g.parent.Close()
	g.parent = nil
	if err != nil {
		return fmt.Errorf("release child gate: %w", err)
	}
	return nil
}

// Close abandons the gate (if still closed, the child exits without exec)
// and frees both ends of the socket.
func (g *Gate) Close() {
	for _, f := range []*os.File{g.child, g.parent} {
		if f != nil {
			f.Close()
		}
	}
	g.child, g.parent = nil, nil
}
