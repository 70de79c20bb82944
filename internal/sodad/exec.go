package sodad

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox"
)

// maxExecTimeout bounds an Exec's time-out (and is its default).
const maxExecTimeout = time.Hour

// Exec runs argv in a persistent sandbox (spec Persistent) with the
// caller's fds as its streams and returns how it ended: its exit status,
// the signal that killed it, and whether its time-out did. Options: dir
// (s, inside the sandbox: /workspace or below, the sandbox's home or a
// granted path), timeout (t, µs, at most an hour; 0: an hour),
// end_others (b, sandbox.ExecSpec.EndOthers: the call returns once
// everything the command left in the sandbox is dead too), interactive
// (b). Fds: stdin, stdout, stderr, and cancel (the read end of a pipe:
// its hang-up kills the command, as the caller cancelling must, since a
// bus call cannot be withdrawn). Its owner needs polkit's exec, anyone
// else exec-other.
func (m sandboxMethods) Exec(sender dbus.Sender, argv []string, opts map[string]dbus.Variant, fds map[string]dbus.Variant) (int32, string, bool, *dbus.Error) {
	es, err := m.b.exec(sender, argv, opts, fds)
	if err != nil {
		return 0, "", false, busError(err)
	}
	return int32(es.Code), es.Signal, es.TimedOut, nil
}

// ExecEx is Exec returning its status as a dictionary, which later
// versions can extend: status (i), signal (s), timed_out (b),
// workspace_full (b: the workspace had no free block or inode at one of
// init's samples while the command ran), memory_kills and tasks_refused
// (t: what the sandbox's limits did while it ran).
func (m sandboxMethods) ExecEx(sender dbus.Sender, argv []string, opts map[string]dbus.Variant, fds map[string]dbus.Variant) (map[string]dbus.Variant, *dbus.Error) {
	es, err := m.b.exec(sender, argv, opts, fds)
	if err != nil {
		return nil, busError(err)
	}
	return map[string]dbus.Variant{
		"status":         dbus.MakeVariant(int32(es.Code)),
		"signal":         dbus.MakeVariant(es.Signal),
		"timed_out":      dbus.MakeVariant(es.TimedOut),
		"workspace_full": dbus.MakeVariant(es.WorkspaceFull),
		"memory_kills":   dbus.MakeVariant(es.MemoryKills),
		"tasks_refused":  dbus.MakeVariant(es.TasksRefused),
	}, nil
}

// exec is Exec and ExecEx: it checks the call and runs the command.
func (b *box) exec(sender dbus.Sender, argv []string, opts map[string]dbus.Variant, fds map[string]dbus.Variant) (sandbox.ExitStatus, error) {
	files, owned, badFd := receiveFds(fds)
	defer func() {
		for _, f := range owned {
			f.Close()
		}
	}()
	c, ctx, cancel, err := b.d.begin(sender)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	defer cancel()
	if badFd != "" {
		return sandbox.ExitStatus{}, errorf(errInvalidFd, "%s", badFd)
	}
	// cancel: the read end of a pipe whose other end the caller holds
	// while it waits; its hang-up (the caller cancelled, or died) kills
	// the command (and, with end_others, what it left) as a timeout
	// would, and the call then returns.
	var cancelFd *os.File
	if f, ok := files["cancel"]; ok {
		if k, err := inspectFd(int(f.Fd())); err != nil || !k.readable || !k.fifo {
			return sandbox.ExitStatus{}, errorf(errInvalidFd, "fd cancel: want the read end of a pipe, whose hang-up cancels the command")
		}
		cancelFd = f
		delete(files, "cancel")
	}
	rest := maps.Clone(opts)
	dir, timeout, endOthers := "", maxExecTimeout, false
	if v, ok := rest["dir"]; ok {
		s, ok := v.Value().(string)
		if !ok {
			return sandbox.ExitStatus{}, errorf(errInvalidArgs, "option dir: want type s, got %s", v.Signature())
		}
		if len(s) > maxString || !path.IsAbs(s) || path.Clean(s) != s || strings.IndexByte(s, 0) >= 0 {
			return sandbox.ExitStatus{}, errorf(errInvalidArgs, "option dir %q: want a clean absolute path inside the sandbox", s)
		}
		dir = s
		delete(rest, "dir")
	}
	if v, ok := rest["timeout"]; ok {
		us, ok := v.Value().(uint64)
		if !ok {
			return sandbox.ExitStatus{}, errorf(errInvalidArgs, "option timeout: want type t (µs), got %s", v.Signature())
		}
		if us > 0 && us < uint64(maxExecTimeout/time.Microsecond) {
			timeout = time.Duration(us) * time.Microsecond
		}
		delete(rest, "timeout")
	}
	if v, ok := rest["end_others"]; ok {
		b, ok := v.Value().(bool)
		if !ok {
			return sandbox.ExitStatus{}, errorf(errInvalidArgs, "option end_others: want type b, got %s", v.Signature())
		}
		endOthers = b
		delete(rest, "end_others")
	}
	o, err := decodeOptions(rest)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	if err := decodeArgv(argv); err != nil {
		return sandbox.ExitStatus{}, err
	}
	st, err := checkFds(files, false)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	if err := b.d.authz.owned(ctx, c, b.owner, opExec, b.details(), o.Interactive); err != nil {
		return sandbox.ExitStatus{}, err
	}
	sb := b.running()
	if sb == nil {
		return sandbox.ExitStatus{}, errorf(errNotRunning, "sandbox %s is not running", b.id)
	}
	b.d.touch()
	execCtx := b.d.run
	if cancelFd != nil {
		var stop context.CancelFunc
		execCtx, stop = context.WithCancel(b.d.run)
		defer stop()
		done := make(chan struct{})
		defer close(done) // before the fds are closed (deferred first)
		go watchCancel(cancelFd, stop, done)
	}
	es, e := sb.Exec(execCtx, sandbox.ExecSpec{Argv: argv, Dir: dir, Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, Timeout: timeout, EndOthers: endOthers})
	b.d.touch()
	if errors.Is(e, sandbox.ErrNotPersistent) {
		return sandbox.ExitStatus{}, errorf(errNotPersistent, "sandbox %s runs one command: create it with spec Persistent to Exec in it", b.id)
	}
	if e != nil {
		return sandbox.ExitStatus{}, fmt.Errorf("exec %s in %s: %w", argv[0], b.id, e)
	}
	return es, nil
}

// watchCancel calls cancel when the caller's cancel pipe hangs up (or
// says anything at all), until done is closed. It polls, so that it holds
// no thread in a read.
func watchCancel(f *os.File, cancel context.CancelFunc, done <-chan struct{}) {
	fd := int32(f.Fd())
	for {
		select {
		case <-done:
			return
		default:
		}
		pfd := []unix.PollFd{{Fd: fd, Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 200)
		if errors.Is(err, unix.EINTR) || err == nil && n == 0 {
			continue
		}
		if err != nil || pfd[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			cancel()
			return
		}
	}
}
