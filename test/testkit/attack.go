package testkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// AttackScript is a host-load attack to run in a sandbox, as python3 -c
// AttackScript DIR KIND (DIR writable in the sandbox and readable by the
// test): KIND forkbomb is issue 23's fork loop (every process forks for
// ever, ignoring the refusals); cpuburn is 8 busy loops. The first
// process, the controller, makes the FIFO DIR/stop, writes DIR/started
// once the attack runs, and ends (so the sandbox's command ends) when
// something is written to DIR/stop (Attack.Stop) or after 90 s.
//
// The controller shares its sandbox's CPU quota with the attack, and with
// a fork bomb's thousand copies throttled together it gets a thousandth
// of it or less, whatever its niceness (measured on kernel 6.18: 37 us of
// CPU a second, nice 0 among nice-19 copies; three bombs under one
// common quota left it none for two and a half minutes on a machine
// where page faults are dear). So it forks nothing once the attack runs
// and waits in the kernel, using no CPU, for the FIFO to be written (it
// polled four times a second before, which spent what little CPU it got
// on the polls); then it reads one small file (the task count) and ends
// the whole attack with one killpg (the attack leads a process group of
// its own; the kernel delivers a group's signal to a child being forked
// too) before it reads the CPU time and writes DIR/usage, an
// AttackUsage: the test's control that the attack ran.
const AttackScript = `
import json, os, select, signal, sys, time
d, kind = sys.argv[1], sys.argv[2]
def read_first(paths, key=None):
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    w = line.split()
                    if key is None:
                        return int(w[0])
                    if w[0] == key:
                        return int(w[1])
        except (OSError, ValueError, IndexError):
            pass
    return -1
def cpu_ns():
    us = read_first(('/sys/fs/cgroup/cpu.stat', '/sys/fs/cgroup/unified/cpu.stat'), 'usage_usec')
    if us >= 0:
        return us * 1000
    return read_first(('/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage',))
def tasks():
    n = read_first(('/sys/fs/cgroup/pids.current', '/sys/fs/cgroup/pids/pids.current'))
    if n >= 0:
        return n
    return sum(1 for p in os.listdir('/proc') if p.isdigit())
def bomb():
    while True:
        try:
            os.fork()
        except OSError:
            pass
def burn():
    while True:
        pass
groups = []
for _ in range(1 if kind == 'forkbomb' else 8):
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        bomb() if kind == 'forkbomb' else burn()
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    groups.append(pid)
stop = d + '/stop'
os.mkfifo(stop)
fd = os.open(stop, os.O_RDONLY | os.O_NONBLOCK)
c0, t0 = cpu_ns(), time.time()
open(d + '/started', 'w').close()
select.select([fd], [], [], 90)
procs = tasks()
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
c1, t1 = cpu_ns(), time.time()
with open(d + '/usage', 'w') as f:
    json.dump({'cpu_seconds': (c1 - c0) / 1e9 if c0 >= 0 and c1 >= 0 else -1, 'wall_seconds': t1 - t0, 'processes': procs}, f)
os._exit(0)
`

// AttackUsage is what AttackScript writes in DIR/usage.
type AttackUsage struct {
	// CPU is the CPU time the sandbox's cgroup used from DIR/started to
	// DIR/stop, in seconds, as the sandbox reads it: cgroup2's cpu.stat,
	// which every cgroup has, controller or not (the unified hierarchy's
	// on a hybrid host), or a v1 cpu,cpuacct hierarchy; -1 if none (a
	// separate v1 cpuacct hierarchy may not hold the sandbox in a cgroup
	// of its own).
	CPU float64 `json:"cpu_seconds"`
	// Wall is the time from DIR/started to DIR/stop, in seconds.
	Wall float64 `json:"wall_seconds"`
	// Processes is how many tasks the sandbox held at the end, from its
	// cgroup's pids.current (its PID namespace's processes where no pids
	// controller is mounted): a fork bomb's fill of its task limit.
	Processes int `json:"processes"`
}

// Attack is AttackScript running in a sandbox, started by StartAttack.
type Attack struct {
	dir     string
	cmd     *exec.Cmd
	out     Buffer
	done    chan struct{}
	waitErr error
}

// StartAttack starts cmd, which runs AttackScript with DIR dir in a
// sandbox (sodactl run ... -- python3 -c AttackScript DIR KIND), and waits
// up to timeout until the attack runs (DIR/started). cmd's output is kept
// for errors. On error the attack is stopped.
func StartAttack(cmd *exec.Cmd, dir string, timeout time.Duration) (*Attack, error) {
	a := &Attack{dir: dir, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &a.out, &a.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the attack: %w", err)
	}
	go func() { a.waitErr = cmd.Wait(); close(a.done) }()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			return a, nil
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("the attack ended before it started (%v):\n%s", a.waitErr, a.out.String())
		default:
		}
	}
	_, err := a.Stop()
	return nil, fmt.Errorf("the attack did not start in %s (%v):\n%s", timeout, err, a.out.String())
}

// Stop ends the attack (a write to the FIFO DIR/stop; a stand-in without
// the FIFO gets a plain file), waits up to a minute for its command to
// exit (then kills it), and returns what it wrote in DIR/usage.
func (a *Attack) Stop() (AttackUsage, error) {
	if err := writeStop(filepath.Join(a.dir, "stop"), a.done); err != nil {
		return AttackUsage{}, fmt.Errorf("stop the attack: %w", err)
	}
	// The controller may get no CPU at all (three fork bombs under one
	// quota starved it for minutes): after 10 s, the attack's process
	// groups are killed from the host, which needs no CPU of theirs, and
	// the processes they held counted here.
	held := -1
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		held = killAttack(a.dir)
	}
	select {
	case <-a.done:
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		<-a.done
		said := "the controller did not write DIR/usage"
		if _, err := os.Stat(filepath.Join(a.dir, "usage")); err == nil {
			said = "the controller wrote DIR/usage and killed the attack: the sandbox did not end after"
		}
		if held >= 0 {
			said += fmt.Sprintf("; %d processes of the attack were killed from the host", held)
		}
		return AttackUsage{}, fmt.Errorf("the attack's command did not end within a minute of %s/stop (%s):\n%s", a.dir, said, a.out.String())
	}
	if a.waitErr != nil {
		return AttackUsage{}, fmt.Errorf("the attack's command: %w\n%s", a.waitErr, a.out.String())
	}
	var use AttackUsage
	b, err := os.ReadFile(filepath.Join(a.dir, "usage"))
	if err == nil {
		err = json.Unmarshal(b, &use)
	}
	if err != nil {
		return AttackUsage{}, fmt.Errorf("the attack's usage report: %w\n%s", err, a.out.String())
	}
	// Killed from the host: the controller counted the tasks after.
	use.Processes = max(use.Processes, held)
	return use, nil
}

// killAttack kills, from the host, the process groups of the attack with
// DIR dir (python processes whose arguments hold dir, but for the
// controller, whose parent is no such process) with SIGKILL, and returns
// how many processes they held. The kernel kills a group at once, forks
// in flight included. The groups are the sandbox's own: its processes
// cannot join a group of another session.
func killAttack(dir string) int {
	type proc struct{ ppid, pgrp int }
	procs := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(b), "\x00")
		// python3 -c AttackScript DIR KIND; sodactl's and init's
		// arguments hold DIR too.
		if err != nil || !strings.HasPrefix(filepath.Base(args[0]), "python") || !slices.Contains(args, dir) {
			continue
		}
		f := statFields(e.Name()) // state ppid pgrp ...
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		procs[pid] = proc{ppid, pgrp}
	}
	groups := map[int]bool{}
	n := 0
	for _, p := range procs {
		if _, child := procs[p.ppid]; child {
			groups[p.pgrp] = true
			n++
		}
	}
	for pgrp := range groups {
		if pgrp > 1 {
			_ = syscall.Kill(-pgrp, syscall.SIGKILL)
		}
	}
	return n
}

// writeStop writes a byte to the FIFO path without blocking: ENXIO (the
// reader is not there yet, or any more) is retried for a minute, or until
// done is closed (the command ended: nothing is left to stop).
func writeStop(path string, done <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
		if err == nil {
			_, err = f.Write([]byte{'\n'})
			return errors.Join(err, f.Close())
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-done:
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Output is what the attack's command wrote (stdout and stderr).
func (a *Attack) Output() string { return a.out.String() }

// CPUs is how many CPUs the sandbox used on average (CPU / Wall).
func (u AttackUsage) CPUs() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return u.CPU / u.Wall
}

// Check is the control that the attack ran: its sandbox used at least a
// quarter of a CPU, and a fork bomb filled at least half of its task
// limit tasksMax.
func (u AttackUsage) Check(kind string, tasksMax int) error {
	if u.CPU < 0.25*u.Wall {
		return fmt.Errorf("the sandbox used %.2f CPU-seconds in %.1f s (less than a quarter of a CPU, or unknown): the attack did not load the host", u.CPU, u.Wall)
	}
	if kind == "forkbomb" && u.Processes < tasksMax/2 {
		return fmt.Errorf("the fork bomb had %d processes at the end, below half its task limit (%d)", u.Processes, tasksMax)
	}
	return nil
}
