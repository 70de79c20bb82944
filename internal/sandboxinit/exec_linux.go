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
	conn, err := openExecConn(fd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-init:", err)
		return 125
	}
	defer conn.Close()
	reqs := readExecRequests(conn)

	// Threads for init's runtime, before a command can take every task
	// the limit allows.
	reserveThreads(sparesFor(cfg))

	// SIGCHLD, caught before the first fork, says when to reap.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	s := newExecServer(cfg, conn)
	defer s.ws.close()

	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				return 0 // the host closed: the sandbox ends
			}
			s.handle(r)
		case <-s.tick:
			s.sampleWorkspace()
		case <-chld:
			if s.reap() || !s.reportEnded() {
				return 125
			}
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				continue
			}
			// Stopping the sandbox: init's exit ends it all.
			cfg.guard.drain()
			return 128 + int(sig.(syscall.Signal))
		}
	}
}

// openExecConn takes the exec socket init inherited at fd.
func openExecConn(fd int) (*net.UnixConn, error) {
	if fd < 3 {
		return nil, errors.New("live sandbox without its exec socket")
	}
	f := os.NewFile(uintptr(fd), "exec")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("exec socket: %w", err)
	}
	return fc.(*net.UnixConn), nil
}

// execRequest is one request of the host, with the descriptors that came
// with it.
type execRequest struct {
	wire.ExecRequest
	files []*os.File
}

// readExecRequests reads the host's requests from conn until it closes
// (then the channel is closed); a request that is not JSON is skipped.
func readExecRequests(conn *net.UnixConn) <-chan execRequest {
	reqs := make(chan execRequest)
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
			var r execRequest
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
	return reqs
}

// execServer is what serveExec keeps between the host's requests: the
// commands running and ended, and the sampling of the workspace.
type execServer struct {
	cfg     *config
	conn    *net.UnixConn
	running map[int]*execRun // pid → its command
	byID    map[uint64]int   // request ID → pid
	ws      *workspace
	// The workspace is sampled while a command runs, not while idle:
	// tick is ticker's channel then, nil else.
	ticker *time.Ticker
	tick   <-chan time.Time
	ended  []endedExec // reaped, not reported yet
}

// newExecServer opens the workspace, and samples it not yet.
func newExecServer(cfg *config, conn *net.UnixConn) *execServer {
	s := &execServer{
		cfg:     cfg,
		conn:    conn,
		running: map[int]*execRun{},
		byID:    map[uint64]int{},
		ws:      openWorkspace(cfg),
		ticker:  time.NewTicker(wire.ExecSampleInterval),
	}
	s.ticker.Stop()
	return s
}

// reply sends one reply to the host.
func (s *execServer) reply(r wire.ExecReply) {
	b, _ := json.Marshal(r)
	_, _, _ = s.conn.WriteMsgUnix(b, nil, nil)
}

// handle answers one request: start a command, or signal one.
func (s *execServer) handle(r execRequest) {
	switch r.Op {
	case "exec":
		s.start(r)
	case "signal":
		if pid, ok := s.byID[r.ID]; ok && r.Signal > 0 {
			// Its own session, so its own process group: the
			// command and what it started, nothing else.
			_ = syscall.Kill(-pid, syscall.Signal(r.Signal))
		}
	}
}

// start forks the command of r, replies with its pid (or why it could not
// start), and samples the workspace while it runs.
func (s *execServer) start(r execRequest) {
	pid, err := startExec(s.cfg, r.ExecRequest, r.files)
	for _, f := range r.files {
		f.Close()
	}
	if err != nil {
		var ce *commandError
		code := 0
		if errors.As(err, &ce) {
			code = ce.Code
		}
		s.reply(wire.ExecReply{ID: r.ID, Error: err.Error(), ErrCode: code})
		return
	}
	s.running[pid] = &execRun{id: r.ID, pid: pid, endOthers: r.EndOthers, full: s.ws.full()}
	s.byID[r.ID] = pid
	if s.ws != nil && s.tick == nil {
		s.ticker.Reset(wire.ExecSampleInterval)
		s.tick = s.ticker.C
	}
	s.reply(wire.ExecReply{ID: r.ID, Pid: pid})
}

// sampleWorkspace marks every running command when the workspace is full.
func (s *execServer) sampleWorkspace() {
	if s.ws.full() {
		for _, run := range s.running {
			run.full = true
		}
	}
}

// reap collects every child that has exited: commands go to ended, an
// orphan is only reaped; it says whether the guard died.
func (s *execServer) reap() bool {
	for {
		var st syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return false
		}
		run, ok := s.running[pid]
		if !ok {
			if s.cfg.guard.died(pid) {
				return true
			}
			continue // an orphan: PID 1 reaps it
		}
		delete(s.running, pid)
		delete(s.byID, run.id)
		s.ended = append(s.ended, endedExec{run: run, status: st})
	}
}

// reportEnded answers for each ended command, ending what it left first
// when it asked, and stops sampling once nothing runs; false when the
// guard died meanwhile.
func (s *execServer) reportEnded() bool {
	for len(s.ended) > 0 {
		e := s.ended[0]
		s.ended = s.ended[1:]
		e.run.full = e.run.full || s.ws.full()
		rep := wire.ExecReply{ID: e.run.id, Exited: true}
		if e.run.endOthers {
			guardAlive, err := endOthers(s.cfg.guard.pidOf(), s.running, s.reap)
			if !guardAlive {
				return false
			}
			if err != nil {
				// At least its own process group.
				_ = syscall.Kill(-e.run.pid, syscall.SIGKILL)
				rep.EndError = err.Error()
			}
			e.run.full = e.run.full || s.ws.full()
		}
		rep.WorkspaceFull = e.run.full
		if e.status.Signaled() {
			rep.Code, rep.Signal = 128+int(e.status.Signal()), int(e.status.Signal())
		} else {
			rep.Code = e.status.ExitStatus()
		}
		s.reply(rep)
	}
	if len(s.running) == 0 && s.tick != nil {
		s.ticker.Stop()
		s.tick = nil
	}
	return true
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
