package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// A live sandbox (Spec.Persistent) runs commands on request:
//
//	host ──exec {id, argv, env, dir, end_others} + stdin, stdout, stderr (SCM_RIGHTS)──▶ init
//	host ◀──────────────── {id, pid} started, or {id, error, code} ──────────────────── init
//	host ──signal {id, sig} (timeout, cancelled ctx) ─────────────────────────────────▶ init
//	host ◀──────────────── {id, exited, code, signal, ws_full} ──────────────────────── init
//
// on a SOCK_SEQPACKET socket pair, one JSON message per packet
// (wire.ExecRequest, wire.ExecReply). Init, already confined, forks each
// command in a session (and process group) of its own, which inherits
// every layer; it reaps them and reports their status. When the host
// closes its end, init exits, and with it, PID 1 of the sandbox's PID
// namespace, every process left in it.

// execChannel is the host's end of a live sandbox's exec socket.
type execChannel struct {
	conn *net.UnixConn

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]chan wire.ExecReply
	ended   bool // init's end is gone: no more commands
}

// LimitEvents counts how often the sandbox's memory and task limits struck
// so far (its init's cgroup; zero where the host keeps no counter).
func (sb *Sandbox) LimitEvents() (cgroup.LimitEvents, error) {
	return cgroup.LimitEventsOf(sb.pid)
}

// openExec makes the exec socket pair (Spec.Persistent): the host's end is
// kept, init's end returned to pass on.
func (sb *Sandbox) openExec() (*os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	hostEnd := os.NewFile(uintptr(pair[0]), "exec-host")
	fc, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		unix.Close(pair[1])
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	sb.execCh.conn = fc.(*net.UnixConn)
	sb.execCh.waiters = map[uint64]chan wire.ExecReply{}
	return os.NewFile(uintptr(pair[1]), "exec-init"), nil
}

// readExecReplies hands init's replies to the Execs waiting for them,
// until init's end is gone; then every Exec still waiting fails.
func (sb *Sandbox) readExecReplies() {
	c := &sb.execCh
	buf := make([]byte, 4096)
	for {
		n, _, _, _, err := c.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			break
		}
		var r wire.ExecReply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			sb.log.Warn("sandbox init: bad exec reply", "err", err)
			continue
		}
		c.mu.Lock()
		ch := c.waiters[r.ID]
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	c.mu.Lock()
	c.ended = true
	for id, ch := range c.waiters {
		close(ch)
		delete(c.waiters, id)
	}
	c.mu.Unlock()
}

// closeExec closes the host's end (teardown).
func (sb *Sandbox) closeExec() {
	if sb.execCh.conn != nil {
		sb.execCh.conn.Close()
	}
}

// Exec runs es in the live sandbox (Spec.Persistent) and returns how it
// ended. Commands may run concurrently; each has its own stdio, timeout
// and status, and shares the sandbox's files, network and limits. At the
// timeout, or when ctx is cancelled, the command's process group is
// killed (TimedOut is set for the timeout). With es.EndOthers, Exec
// returns only once everything the command left in the sandbox is dead
// too. A command that cannot start is a *CommandError (126, 127).
// ExitStatus.WorkspaceFull says whether the workspace filled up while it
// ran (Spec.WorkspaceSize).
func (sb *Sandbox) Exec(ctx context.Context, es ExecSpec) (ExitStatus, error) {
	c := &sb.execCh
	if c.conn == nil {
		return ExitStatus{}, ErrNotPersistent
	}
	if len(es.Argv) == 0 || es.Argv[0] == "" {
		return ExitStatus{}, errors.New("sandbox exec: no command to run")
	}
	kept, dropped := FilterEnv(es.Env)
	if len(dropped) > 0 {
		sb.record(Record{Event: "env", Dropped: dropped})
	}
	stdio := []*os.File{es.Stdin, es.Stdout, es.Stderr}
	for i, f := range stdio {
		if f != nil {
			continue
		}
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return ExitStatus{}, fmt.Errorf("sandbox exec: %w", err)
		}
		defer null.Close()
		stdio[i] = null
	}

	ch := make(chan wire.ExecReply, 2)
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return ExitStatus{}, errors.New("sandbox exec: the sandbox has ended")
	}
	c.next++
	id := c.next
	c.waiters[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}()

	// The limit counters before, to tell what this command hit (commands
	// running at once share them: each hears of the other's hits).
	before, beforeErr := sb.LimitEvents()
	msg, err := json.Marshal(wire.ExecRequest{Op: "exec", ID: id, Argv: es.Argv, Env: kept, Dir: es.Dir, EndOthers: es.EndOthers})
	if err != nil {
		return ExitStatus{}, fmt.Errorf("sandbox exec: %w", err)
	}
	if len(msg) > wire.ExecMaxMsg {
		return ExitStatus{}, fmt.Errorf("sandbox exec: request of %d bytes exceeds %d", len(msg), wire.ExecMaxMsg)
	}
	rights := unix.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()))
	if _, _, err := c.conn.WriteMsgUnix(msg, rights, nil); err != nil {
		return ExitStatus{}, fmt.Errorf("sandbox exec: send request: %w", err)
	}

	var timeout <-chan time.Time
	if es.Timeout > 0 {
		t := time.NewTimer(es.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var st ExitStatus
	done := ctx.Done()
	kill := func() {
		req, _ := json.Marshal(wire.ExecRequest{Op: "signal", ID: id, Signal: int(syscall.SIGKILL)})
		_, _, _ = c.conn.WriteMsgUnix(req, nil, nil)
	}
	for {
		select {
		case r, ok := <-ch:
			switch {
			case !ok:
				return st, errors.New("sandbox exec: the sandbox ended before the command")
			case r.Error != "":
				err := errors.New(r.Error)
				if r.ErrCode != 0 {
					err = &CommandError{Code: r.ErrCode, Err: err}
				}
				return st, err
			case r.Exited:
				st.Code, st.WorkspaceFull = r.Code, r.WorkspaceFull
				if r.Signal != 0 {
					st.Signal = unix.SignalName(syscall.Signal(r.Signal))
				}
				if st.WorkspaceFull {
					sb.record(Record{Event: "limit", Argv: es.Argv, Detail: "workspace: full (no free block or inode at a sample while the command ran)"})
				}
				if after, err := sb.LimitEvents(); err == nil && beforeErr == nil {
					st.MemoryKills, st.TasksRefused = after.OOMKills-before.OOMKills, after.TasksMax-before.TasksMax
					if st.MemoryKills > 0 {
						sb.record(Record{Event: "limit", Argv: es.Argv, Layer: LayerCgroup, Detail: fmt.Sprintf("memory: the limit killed %d processes", st.MemoryKills)})
					}
					if st.TasksRefused > 0 {
						sb.record(Record{Event: "limit", Argv: es.Argv, Layer: LayerCgroup, Detail: fmt.Sprintf("tasks: the limit refused forks (at least %d)", st.TasksRefused)})
					}
				}
				sb.record(Record{Event: "exec-exit", Argv: es.Argv, Exit: &st})
				if r.EndError != "" {
					return st, fmt.Errorf("sandbox exec: the command ended, but not what it left (only its process group was killed): %s", r.EndError)
				}
				return st, nil
			case r.Pid != 0:
				sb.record(Record{Event: "exec", Argv: es.Argv, Pid: r.Pid})
			}
		case <-timeout:
			timeout = nil
			st.TimedOut = true
			sb.log.Warn("sandbox command timed out; killing it", "argv", es.Argv, "timeout", es.Timeout)
			kill()
		case <-done:
			done = nil
			kill()
		}
	}
}

// Close ends a live sandbox: init stops taking commands and exits, which
// kills everything still running in it, and the sandbox is torn down
// (Wait). On a sandbox that is not persistent it is Wait.
func (sb *Sandbox) Close(ctx context.Context) error {
	if sb.execCh.conn != nil {
		_ = sb.execCh.conn.CloseWrite()
	}
	_, err := sb.Wait(ctx)
	return err
}
