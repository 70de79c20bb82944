package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// serveExec is a live sandbox's init once confined (see exec_linux.go): it runs
// the host's commands, reaps them and every orphan, and reports each
// command's status, until the host closes the exec socket (exit 0) or
// signals init (128+N). It runs on the locked, confined thread, which
// forks every command: each inherits all the layers.
func serveExec(cfg *config, fd int, sigs chan os.Signal) int {
	if fd < 3 {
		fmt.Fprintln(os.Stderr, "soda-sandbox-init: live sandbox without its exec socket")
		return 125
	}
	f := os.NewFile(uintptr(fd), "exec")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-init: exec socket:", err)
		return 125
	}
	conn := fc.(*net.UnixConn)
	defer conn.Close()

	type request struct {
		wire.ExecRequest
		files []*os.File
	}
	reqs := make(chan request)
	go func() {
		defer close(reqs)
		buf := make([]byte, wire.ExecMaxMsg)
		oob := make([]byte, unix.CmsgSpace(3*4))
		for {
			// Received descriptors are close-on-exec (MSG_CMSG_CLOEXEC):
			// a command gets only its own three, as its 0, 1, 2.
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil || n == 0 {
				return
			}
			var r request
			if err := json.Unmarshal(buf[:n], &r.ExecRequest); err != nil {
				continue
			}
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if fds, err := unix.ParseUnixRights(&m); err == nil {
						for _, fd := range fds {
							r.files = append(r.files, os.NewFile(uintptr(fd), "stdio"))
						}
					}
				}
			}
			reqs <- r
		}
	}()
	reply := func(r wire.ExecReply) {
		b, _ := json.Marshal(r)
		_, _, _ = conn.WriteMsgUnix(b, nil, nil)
	}

	// Threads for init's runtime, before a command can take every task
	// the limit allows.
	reserveThreads(spareThreads)
	// SIGCHLD, caught before the first fork, says when to reap.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	running := map[int]*execRun{} // pid → its command
	byID := map[uint64]int{}
	ws := openWorkspace(cfg)
	defer ws.close()
	// The workspace is sampled while a command runs, not while idle.
	ticker := time.NewTicker(wire.ExecSampleInterval)
	ticker.Stop()
	var tick <-chan time.Time
	var ended []endedExec // reaped, not reported yet

	// reap collects every child that has exited: commands go to ended, an
	// orphan is only reaped; it says whether the guard died.
	reap := func() bool {
		for {
			var st syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				return false
			}
			run, ok := running[pid]
			if !ok {
				if cfg.guard.died(pid) {
					return true
				}
				continue // an orphan: PID 1 reaps it
			}
			delete(running, pid)
			delete(byID, run.id)
			ended = append(ended, endedExec{run: run, status: st})
		}
	}
	// report answers for each ended command, ending what it left first
	// when it asked; false when the guard died meanwhile.
	report := func() bool {
		for len(ended) > 0 {
			e := ended[0]
			ended = ended[1:]
			e.run.full = e.run.full || ws.full()
			rep := wire.ExecReply{ID: e.run.id, Exited: true}
			if e.run.endOthers {
				guardAlive, err := endOthers(cfg.guard.pidOf(), running, reap)
				if !guardAlive {
					return false
				}
				if err != nil {
					// At least its own process group.
					_ = syscall.Kill(-e.run.pid, syscall.SIGKILL)
					rep.EndError = err.Error()
				}
				e.run.full = e.run.full || ws.full()
			}
			rep.WorkspaceFull = e.run.full
			if e.status.Signaled() {
				rep.Code, rep.Signal = 128+int(e.status.Signal()), int(e.status.Signal())
			} else {
				rep.Code = e.status.ExitStatus()
			}
			reply(rep)
		}
		if len(running) == 0 && tick != nil {
			ticker.Stop()
			tick = nil
		}
		return true
	}

	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				return 0 // the host closed: the sandbox ends
			}
			switch r.Op {
			case "exec":
				pid, err := startExec(cfg, r.ExecRequest, r.files)
				for _, f := range r.files {
					f.Close()
				}
				if err != nil {
					var ce *commandError
					code := 0
					if errors.As(err, &ce) {
						code = ce.Code
					}
					reply(wire.ExecReply{ID: r.ID, Error: err.Error(), ErrCode: code})
					continue
				}
				running[pid] = &execRun{id: r.ID, pid: pid, endOthers: r.EndOthers, full: ws.full()}
				byID[r.ID] = pid
				if ws != nil && tick == nil {
					ticker.Reset(wire.ExecSampleInterval)
					tick = ticker.C
				}
				reply(wire.ExecReply{ID: r.ID, Pid: pid})
			case "signal":
				if pid, ok := byID[r.ID]; ok && r.Signal > 0 {
					// Its own session, so its own process group: the
					// command and what it started, nothing else.
					_ = syscall.Kill(-pid, syscall.Signal(r.Signal))
				}
			}
		case <-tick:
			if ws.full() {
				for _, run := range running {
					run.full = true
				}
			}
		case <-chld:
			if reap() || !report() {
				return 125
			}
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				continue
			}
			// Stopping the sandbox: init's exit ends it all.
			cfg.guard.drain()
			return 128 + int(s.(syscall.Signal))
		}
	}
}

// execRun is a command init runs for the host.
type execRun struct {
	id        uint64
	pid       int
	endOthers bool // wire.ExecRequest.EndOthers
	full      bool // the workspace was seen full while it ran
}

// endedExec is a command reaped but not reported yet.
type endedExec struct {
	run    *execRun
	status syscall.WaitStatus
}

// startExec forks one command of a live sandbox in a new session, with
// the sandbox's environment and directory unless the request has its own.
func startExec(cfg *config, r wire.ExecRequest, files []*os.File) (int, error) {
	if len(files) != 3 {
		return 0, fmt.Errorf("exec request with %d descriptors, want 3", len(files))
	}
	if len(r.Argv) == 0 {
		return 0, errors.New("exec request without a command")
	}
	env := append(append([]string(nil), cfg.Env...), r.Env...)
	dir := cfg.Dir
	if r.Dir != "" {
		dir = r.Dir
	}
	path, err := lookPath(r.Argv[0], env)
	if err != nil {
		return 0, err
	}
	proc, err := os.StartProcess(path, r.Argv, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", path, err)
	}
	pid := proc.Pid
	_ = proc.Release() // reaped by pid (Wait4), not through os.Process
	return pid, nil
}
