package sandboxinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// Ending what a command left (wire.ExecRequest.EndOthers).
//
// A live sandbox holds init (PID 1: the exec server, the egress relay
// and the DNS sink are its threads), the repository guard when a
// read-write grant needs one (a process init forks before it confines
// itself, in init's session), and the commands, each in a session of its
// own whose id is its pid. When a command that asked for it ends, init
// kills (SIGKILL) every other process of the PID namespace except the
// guard and the members of the sessions of the commands still running,
// and reports the command's exit only once none of them is alive.
//
// kill(-1, SIGKILL) from PID 1 would do it in one race-free step, but the
// seccomp filter, which init runs under as well, refuses kill(-1), and
// it could reach the guard. So init walks /proc instead, pass after pass:
// each pass reads every process's state and session and kills each live
// one it may not keep; the walk ends with a pass that finds none alive
// (a zombie is dead: init reaps its own, another command reaps the rest;
// but a zombie whose other threads still run is alive), or after
// endOthersLimit, with an error naming how many are left.
// A process that has been sent SIGKILL forks no more (a fork in progress
// sees the fatal signal and fails), so a pass can only miss what a process
// forked between the pass's listing and its own kill, and the next pass
// kills that: a fork loop ends within a few passes, however fast it
// forks. Nothing can join a running command's session (setsid makes a new
// one, setpgid stays within the caller's), so a process that left with
// setsid, a daemon's double fork, nohup or a process that ignores SIGTERM
// are all killed. The session is read just before the kill; a pid
// recycled in between (the kernel hands pids out cyclically, so that
// would take pid_max forks within that window) is the only way a kept
// process could be hit.

// endOthers ends every process of the sandbox but init, the guard (pid
// guard, 0 for none) and the sessions of the commands in running (ended
// commands leave running as reap finds them), reaping init's children on
// the way. It returns false when reap says the guard died, and an error
// when /proc cannot be read (nothing is known to be ended then).
func endOthers(guard int, running map[int]*execRun, reap func() bool) (bool, error) {
	start := time.Now()
	warned := false
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		alive, err := killPass(guard, func(sid int) bool { _, ok := running[sid]; return ok })
		if err != nil {
			return true, err
		}
		if reap() {
			return false, nil
		}
		if alive == 0 {
			return true, nil
		}
		if !warned && time.Since(start) > 5*time.Second {
			warned = true
			fmt.Fprintf(os.Stderr, "soda-sandbox-init: %d processes left by a command are still alive after SIGKILL for %s\n", alive, time.Since(start).Round(time.Millisecond))
		}
		if time.Since(start) > endOthersLimit {
			// A process SIGKILL cannot end (stuck in the kernel): init
			// must go on serving; the host is told, and stops the
			// sandbox if it wants it settled.
			return true, fmt.Errorf("%d processes left by the command still alive %s after SIGKILL", alive, endOthersLimit)
		}
		time.Sleep(delay)
	}
}

// endOthersLimit bounds endOthers: past it, what is still alive is
// reported, not waited for.
const endOthersLimit = 10 * time.Second

// killPass sends SIGKILL to every live process of the PID namespace but
// PID 1, guard and the members of the sessions keep accepts, and returns
// how many it sent it to.
func killPass(guard int, keep func(sid int) bool) (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	alive := 0
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 1 || pid == guard {
			continue
		}
		state, sid, ok := procStat(pid)
		if !ok || state == 'X' || keep(sid) {
			continue // gone, dead, or another command's
		}
		// A zombie is dead, unless only its main thread exited: its
		// other threads run on (ps shows "Zl"), and SIGKILL to its pid
		// reaches them.
		if state == 'Z' && threads(pid) <= 1 {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return alive, fmt.Errorf("kill %d: %w", pid, err)
		}
		alive++
	}
	return alive, nil
}

// procStat reads a process's state and session from /proc/PID/stat;
// ok is false when it is gone.
func procStat(pid int) (state byte, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp session …": comm may hold anything,
	// up to the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return 0, 0, false
	}
	sid, err = strconv.Atoi(f[3])
	return f[0][0], sid, err == nil
}

// workspace samples the fill of a live sandbox's workspace.
type workspace struct {
	fd   int
	page uint64
}

// openWorkspace opens the workspace (wire.SandboxWorkspace) to sample it,
// or returns nil for a sandbox without one. It is opened once, as a path
// descriptor: what the command later does to the name changes nothing.
func openWorkspace(cfg *config) *workspace {
	if cfg.WorkspaceSize <= 0 {
		return nil
	}
	fd, err := unix.Open(wire.SandboxWorkspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-init: the workspace cannot be sampled:", err)
		return nil
	}
	return &workspace{fd: fd, page: uint64(os.Getpagesize())}
}

// full says whether the workspace has less than a page of free space or
// no free inode (a tmpfs without a limit has neither count: never full).
func (w *workspace) full() bool {
	if w == nil {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(w.fd, &st); err != nil {
		return false
	}
	return (st.Blocks > 0 && st.Bavail*uint64(st.Bsize) < w.page) || (st.Files > 0 && st.Ffree == 0)
}

func (w *workspace) close() {
	if w != nil {
		unix.Close(w.fd)
	}
}

// spareThreads is how many idle OS threads a live sandbox's init keeps
// for its runtime (reserveThreads): it serves several commands at once.
const spareThreads = 8

// runSpareThreads is how many a one-command sandbox's init keeps. Its
// goroutines are few; what a fork bomb at the limit made it abort for was
// one thread more, to take a signal. Eight cost 2.5 ms of every run's
// start on 2 CPUs, even made in the background; three, made just before
// the command, nothing measurable (A/B of 41 rounds, twice: +0.3 and
// -0.5 ms), and no abort in 30 runs that filled the limit and took a
// SIGTERM (4 in 10 with three made early, which init's own goroutines
// then took).
const runSpareThreads = 3

// reserveThreads makes the Go runtime of init hold n more idle OS
// threads, taken while the sandbox's task limit still has room: the
// runtime makes a thread whenever a goroutine is ready and none is idle
// (init's locked thread blocked in a system call), and when it cannot (a
// fork loop holds every task the limit allows) it aborts, which would
// end the sandbox. Idle threads are kept for the process's life and
// reused first. Each goroutine locks itself to a thread and blocks, so
// that the next needs another thread; then they all return, leaving
// their threads idle. sparesFor says how many.
func reserveThreads(n int) {
	if n <= 0 {
		return
	}
	var ready sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
}

// sparesFor is how many idle threads init reserves (reserveThreads):
// spareThreads for a live sandbox, runSpareThreads for one command, and
// no more than a quarter of what the task limit leaves beside the
// threads init has (a validator may run with TasksMax=16).
func sparesFor(cfg *config) int {
	n := runSpareThreads
	if cfg.Persistent {
		n = spareThreads
	}
	if cfg.NProc > 0 {
		n = min(n, (int(cfg.NProc)-threads(os.Getpid()))/4)
	}
	return max(n, 0)
}
