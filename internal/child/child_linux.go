package child

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
)

// Process is a running child.
type Process struct {
	// Stdin is the write end of the child's stdin.
	Stdin *os.File
	// Stdout is the read end of the child's stdout.
	Stdout *os.File
	// Stderr is the read end of the child's stderr.
	Stderr *os.File

	cmd    *exec.Cmd   // unsupervised: the child itself
	sup    *supervised // supervised: the supervisor
	pid    int
	group  cgroup.Group
	log    *slog.Logger
	ledger *Ledger
	id     string

	exited  chan struct{}
	waitErr error

	stopOnce sync.Once
	stopDone chan struct{}
}

// activationEnv lists variables that belong to the bridge, not the child.
var activationEnv = []string{"LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=", "NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=", "INVOCATION_ID="}

func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		skip := false
		for _, p := range activationEnv {
			if strings.HasPrefix(kv, p) {
				skip = true
				break
			}
		}
		if !skip {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Start starts spec inside a new group from placer. The caller must call
// Stop, which reaps the child and everything it spawned.
func Start(ctx context.Context, log *slog.Logger, placer cgroup.Placer, id string, spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("start child: empty command")
	}
	if spec.User != nil && !spec.Supervise {
		return nil, errors.New("start child: User needs Supervise")
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	if spec.Supervise && !filepath.IsAbs(path) {
		if path, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
		}
	}
	group, err := placer.NewGroup(id)
	if err != nil {
		return nil, fmt.Errorf("create group for %s: %w", id, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		group.Release()
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		group.Release()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		group.Release()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   spec.Argv,
		Dir:    spec.Dir,
		Env:    childEnv(spec.Env),
		Stdin:  inR,
		Stdout: outW,
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := group.Prepare(cmd); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		group.Release()
		return nil, err
	}
	p := &Process{
		Stdin:    inW,
		Stdout:   outR,
		Stderr:   errR,
		group:    group,
		log:      log,
		ledger:   spec.Ledger,
		id:       id,
		exited:   make(chan struct{}),
		stopDone: make(chan struct{}),
	}
	var pid int
	if spec.Supervise {
		p.sup, err = startSupervisor(cmd, spec.User)
		if err == nil {
			pid = p.sup.pid
		}
	} else {
		err = cmd.Start()
		if err == nil {
			p.cmd = cmd
			pid = cmd.Process.Pid
		}
	}
	if err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		group.Release()
		return nil, fmt.Errorf("start %s: %w", spec.Argv[0], err)
	}
	p.pid = pid
	closeAll(inR, outW, errW)
	if err := group.Started(ctx, pid); err != nil {
		// The child has not run the real command yet (a gated group
		// releases it only on success); make sure it never does.
		if p.sup != nil {
			p.sup.stop(group)
		} else {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		closeAll(inW, outR, errR)
		if rerr := group.Release(); rerr != nil {
			log.Warn("release child group", "group", group.String(), "err", rerr)
		}
		return nil, fmt.Errorf("place %s in %s: %w", spec.Argv[0], group.String(), err)
	}
	if p.sup != nil {
		if d, ok := group.(cgroup.DirGroup); ok && d.CgroupDir() != "" {
			p.sup.tell(supMsg{Cgroup: d.CgroupDir(), Remove: d.OwnsDir()})
		}
		go func() {
			p.waitErr = p.sup.wait()
			close(p.exited)
		}()
	} else {
		go func() {
			p.waitErr = cmd.Wait()
			close(p.exited)
		}()
	}
	if p.ledger != nil {
		if err := p.ledger.add(p); err != nil {
			log.Warn("record child for recovery after a crash", "pid", pid, "err", err)
		}
	}
	return p, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// Pid returns the child's process id.
func (p *Process) Pid() int { return p.pid }

// Group returns the group the child runs in.
func (p *Process) Group() cgroup.Group { return p.group }

// Exited is closed when the child process (not its descendants) has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitStatus describes how the child ended; valid after Exited is closed.
func (p *Process) ExitStatus() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Stop shuts the child down following the MCP stdio rules and kills whatever
// is left in its group. It is safe to call more than once and from several
// goroutines; every call returns when the group is empty and released.
func (p *Process) Stop(grace Grace) {
	p.stopOnce.Do(func() {
		defer close(p.stopDone)
		p.Stdin.Close()
		if !p.waitFor(grace.AfterStdinClose) {
			if err := p.group.Signal(syscall.SIGTERM); err != nil {
				p.log.Debug("sigterm child group", "group", p.group.String(), "err", err)
			}
			p.waitFor(grace.AfterTerm)
		}
		// The leader is gone (or will be killed now); kill anything it left.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.group.Kill(ctx); err != nil {
			p.log.Warn("kill child group", "group", p.group.String(), "err", err)
		}
		<-p.exited
		if p.sup != nil {
			// The supervisor sweeps once more and exits.
			p.sup.stop(p.group)
		}
		p.Stdout.Close()
		p.Stderr.Close()
		if err := p.group.Release(); err != nil {
			p.log.Warn("release child group", "group", p.group.String(), "err", err)
		}
		if p.ledger != nil {
			p.ledger.remove(p)
		}
	})
	<-p.stopDone
}

func (p *Process) waitFor(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}
