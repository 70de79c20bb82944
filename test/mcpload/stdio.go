package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// stdioSession talks newline-delimited JSON-RPC to its own child process.
type stdioSession struct {
	cfg    *config
	bodies *requestBodies
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	w      *bufio.Writer
	r      *bufio.Reader
	nextID int
	dead   error
}

func newStdioSession(cfg *config) *stdioSession {
	return &stdioSession{cfg: cfg}
}

// start spawns the child in its own process group.
func (s *stdioSession) start() error {
	cmd := exec.Command(s.cfg.command[0], s.cfg.command[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("stdout pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.cfg.command[0], err)
	}
	s.cmd, s.stdin = cmd, stdin
	trackGroup(cmd.Process.Pid, nil)
	s.w = bufio.NewWriterSize(stdin, 16<<10)
	s.r = bufio.NewReaderSize(stdout, 64<<10)
	return nil
}

// roundTrip writes one request line and reads lines until the response with
// the same id arrives; non-JSON lines and notifications are skipped. When ctx
// ends first the child is killed and the session is dead.
func (s *stdioSession) roundTrip(ctx context.Context, line []byte, id int) (*rpcMessage, error) {
	if s.dead != nil {
		return nil, s.dead
	}
	stop := context.AfterFunc(ctx, s.kill)
	defer stop()
	if err := s.send(line); err != nil {
		return nil, err
	}
	for {
		l, err := s.r.ReadBytes('\n')
		if t := bytes.TrimSpace(l); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
			if m, merr := matchResponse(t, id); merr == nil && m != nil {
				return m, nil
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				s.dead = fmt.Errorf("timed out waiting for id %d: %w", id, ctx.Err())
			} else {
				s.dead = fmt.Errorf("read child stdout: %w", err)
			}
			return nil, s.dead
		}
	}
}

func (s *stdioSession) send(line []byte) error {
	s.w.Write(line)
	s.w.WriteByte('\n')
	if err := s.w.Flush(); err != nil {
		s.dead = fmt.Errorf("write child stdin: %w", err)
		return s.dead
	}
	return nil
}

func (s *stdioSession) initialize(ctx context.Context) error {
	if s.cmd == nil {
		b, err := newRequestBodies(s.cfg)
		if err != nil {
			return err
		}
		s.bodies = b
		if err := s.start(); err != nil {
			return err
		}
	}
	s.nextID++
	m, err := s.roundTrip(ctx, s.bodies.initialize(s.nextID), s.nextID)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if _, err := checkInit(m, s.cfg.protoCheck); err != nil {
		return err
	}
	if err := s.send(s.bodies.initNotif); err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	return nil
}

func (s *stdioSession) call(ctx context.Context) error {
	s.nextID++
	m, err := s.roundTrip(ctx, s.bodies.call(s.nextID), s.nextID)
	if err != nil {
		return fmt.Errorf("tools/call: %w", err)
	}
	return checkCall(m, s.cfg.expect)
}

// kill sends SIGKILL to the child's whole process group.
func (s *stdioSession) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// close closes the child's stdin and waits up to 2 s for it to exit, then
// kills its process group (grandchildren included).
func (s *stdioSession) close() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Second):
		s.kill()
		err = <-done
		if err == nil {
			err = errors.New("child did not exit within 2s of stdin EOF")
		}
	}
	s.kill() // leftovers in the group
	untrackGroup(s.cmd.Process.Pid)
	if err != nil && s.dead == nil {
		return fmt.Errorf("child exit: %w", err)
	}
	return nil
}
