package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childOut is the one JSON line a probe-child prints.
type childOut struct {
	// OK is true when the attempted operation succeeded (an escape).
	OK bool `json:"ok"`
	// Errno names the error number of a failed attempt.
	Errno string `json:"errno,omitempty"`
	// Detail says what was tried and what came of it.
	Detail string `json:"detail"`
	// HostLacks is true when the host itself cannot do what the probe
	// tries, filter or no filter: the row is informational there.
	HostLacks bool `json:"host_lacks,omitempty"`
}

// childFunc is a probe run in its own process by "sbxprobe probe-child".
type childFunc func(args []string) childOut

// children are the probes that may crash, change the whole process (root
// directory, tracer, cgroup) or need a thread of their own. The map is
// filled in init to avoid an initialisation cycle with cmdProbeChild.
var children map[string]childFunc

func init() {
	children = map[string]childFunc{
		"int80":        childInt80,
		"x32":          childX32,
		"traceme":      childTraceme,
		"ptrace-seize": childPtraceSeize,
		"setns":        childSetns,
		"unshare-ns":   childUnshareNS,
		"chroot":       childChroot,
		"execveat":     childExecveat,
		"cgroup-move":  childCgroupMove,
	}
}

// cmdProbeChild runs one child probe and prints its childOut.
func cmdProbeChild(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "sbxprobe probe-child: missing NAME")
		return 2
	}
	f, ok := children[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sbxprobe probe-child: unknown probe %q\n", args[0])
		return 2
	}
	return writeJSON(stdout, f(args[1:]))
}

// outOf makes a childOut for an attempt that succeeds when err is nil.
func outOf(what string, err error) childOut {
	if err != nil {
		return childOut{Errno: errnoName(err), Detail: fmt.Sprintf("%s: %v", what, err)}
	}
	return childOut{OK: true, Detail: what + ": succeeded"}
}

// childRun is how a probe-child ended.
type childRun struct {
	out      *childOut
	code     int
	signal   syscall.Signal
	stdout   string
	stderr   string
	startErr error
	timedOut bool
}

// runChild re-executes this binary as "probe-child NAME ARGS" and waits for
// it at most timeout. Asynchronous preemption is turned off in the child so
// that the runtime sends it no signals (which matters once it is traced).
func runChild(timeout time.Duration, name string, args ...string) childRun {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe", append([]string{"probe-child", name}, args...)...)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.WaitDelay = 200 * time.Millisecond
	err := cmd.Run()
	c := childRun{stdout: so.String(), stderr: strings.TrimSpace(se.String()), timedOut: ctx.Err() != nil}
	if cmd.ProcessState == nil {
		c.startErr = err
		return c
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		c.signal = ws.Signal()
	}
	c.code = cmd.ProcessState.ExitCode()
	for _, line := range strings.Split(c.stdout, "\n") {
		var o childOut
		if line = strings.TrimSpace(line); line != "" && json.Unmarshal([]byte(line), &o) == nil {
			c.out = &o
		}
	}
	return c
}

// signalHint explains why a probe-child may have been killed by sig.
func signalHint(sig syscall.Signal) string {
	switch sig {
	case unix.SIGSYS:
		return " (seccomp killed it)"
	case unix.SIGSEGV:
		return " (the kernel refused the call with a fault)"
	}
	return ""
}

// result maps a child's end to a row: a report decides; a kill by a signal
// is a denial; anything else is inconclusive and so not blocked.
func (c childRun) result(what string) Result {
	switch {
	case c.timedOut:
		return Result{Timeout: true, Detail: what + ": probe-child did not finish in time"}
	case c.startErr != nil:
		return Result{Errno: errnoName(c.startErr), Detail: what + ": could not start probe-child: " + c.startErr.Error()}
	case c.signal != 0:
		return Result{Blocked: true, Errno: unix.SignalName(c.signal),
			Detail: fmt.Sprintf("%s: probe-child killed by %s%s", what, unix.SignalName(c.signal), signalHint(c.signal))}
	case c.out == nil:
		return Result{Detail: fmt.Sprintf("%s: probe-child exited %d without a report: %s", what, c.code, c.stderr)}
	case c.out.HostLacks:
		return Result{Info: true, Detail: "host lacks: " + c.out.Detail}
	}
	return Result{Blocked: !c.out.OK, Errno: c.out.Errno, Detail: c.out.Detail}
}
