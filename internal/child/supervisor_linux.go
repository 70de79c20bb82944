package child

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/cgroup"
)

// The supervisor keeps the guarantee that nothing of a child outlives its
// session even when the program that started it (soda-mcpd) is killed with
// SIGKILL. Start with Spec.Supervise re-executes the program as a
// supervisor (argv[0] supArg0 and supEnv=1 together, like the gate),
// which starts the real command (or its gate) as its own child and stays
// its parent:
//
//   - it is a child subreaper (PR_SET_CHILD_SUBREAPER), so whatever the
//     child leaves when its own parent dies is re-parented to it, not to
//     init, and stays killable;
//   - it holds one end of a socket pair whose other end only the parent
//     has. End of file on it (the parent closed it in Stop, or died) makes
//     it kill the whole group: cgroup.kill (or every pid in cgroup.procs)
//     of the child's cgroup, the child's process group while its leader is
//     not reaped, and every descendant it has, until none is left; then it
//     exits;
//   - it lives outside the child's group (in the parent's cgroup and a
//     process group of its own): it does not count against TasksMax=, a
//     kill of the group does not kill it, and the real command still
//     starts inside its group (CLONE_INTO_CGROUP, or the gate for scopes);
//   - it starts the real command from a locked OS thread on which it has
//     dropped what the child must not have (see dropPrivileges), and keeps
//     that thread waiting for the child, so that the child's parent-death
//     signal (which Linux ties to the forking thread) fires only when the
//     supervisor itself dies.
//
// Protocol on fd supCtlFD, one JSON object per line. Parent to supervisor:
// first a supConfig, later optionally {"cgroup": DIR} (the directory of a
// group placed after the fork, for the final sweep). Supervisor to
// parent: {"pid": N} once the child runs (or {"error": ...} and exit),
// then {"exit": STATUS} (a wait(2) status) when the child has exited.
const (
	supArg0 = "soda-child-supervisor"
	supEnv  = "SODA_CHILD_SUPERVISOR"
	// supCtlFD is the control socket; the child's stdin, stdout and stderr
	// follow, then the child's extra files, then the cgroup directory.
	supCtlFD    = 3
	supStdioFD  = 4
	supExtraFD  = 7
	supSweepMax = 10 * time.Second
	// supComm is the supervisor's process name (15 characters at most).
	supComm = "soda-supervisor"
)

// supConfig is what the supervisor needs to start the child.
type supConfig struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir,omitempty"`
	// Extra is how many extra files the child gets (from fd 3 on); they
	// arrive at supExtraFD on.
	Extra int `json:"extra"`
	// CgroupFD, if set, is the supervisor's fd of the cgroup directory the
	// child is cloned into.
	CgroupFD int `json:"cgroup_fd,omitempty"`
	// Identity, if set, is who the child runs as.
	Identity *Identity `json:"identity,omitempty"`
}

// supMsg is one line on the control socket.
type supMsg struct {
	Config *supConfig `json:"config,omitempty"`
	Cgroup string     `json:"cgroup,omitempty"`
	// Remove asks the supervisor to remove the Cgroup directory after its
	// final sweep (a cgroup soda created itself, not a scope's).
	Remove bool   `json:"remove,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Exit   *int   `json:"exit,omitempty"`
	Error  string `json:"error,omitempty"`
}

func isSupervisor() bool {
	return len(os.Args) > 0 && os.Args[0] == supArg0 && os.Getenv(supEnv) == "1"
}

// RunSupervisor runs this process as a child supervisor; it never returns.
func runSupervisorMain() {
	err := runSupervisor()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s[%d]: %v\n", supArg0, os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

type supervisor struct {
	ctl    *os.File
	out    *json.Encoder
	cfg    supConfig
	cgfd   int
	cgdir  string
	cgrm   bool
	pid    int           // the child
	reaped chan struct{} // closed once the child is reaped
}

func runSupervisor() error {
	// Terminal and service signals are for soda-mcpd, which tells us
	// what to do through the socket. Caught, not ignored: an ignored
	// signal would stay ignored in the child across exec. SIGPIPE too, so
	// that a closed stderr does not kill us.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()
	// Named for ps and systemd's logs ("exe" otherwise, from
	// /proc/self/exe); the main thread's name is the process's.
	_ = os.WriteFile(fmt.Sprintf("/proc/self/task/%d/comm", os.Getpid()), []byte(supComm), 0)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	s := &supervisor{ctl: os.NewFile(supCtlFD, "supervisor-ctl"), cgfd: -1, reaped: make(chan struct{})}
	s.out = json.NewEncoder(s.ctl)
	in := bufio.NewReader(s.ctl)
	var first supMsg
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if err := json.Unmarshal(line, &first); err != nil || first.Config == nil {
		return fmt.Errorf("bad configuration %q: %v", line, err)
	}
	s.cfg = *first.Config
	if s.cfg.CgroupFD > 0 {
		s.cgfd = s.cfg.CgroupFD
	}
	started := make(chan error, 1)
	go s.run(started)
	if err := <-started; err != nil {
		_ = s.out.Encode(supMsg{Error: err.Error()})
		s.sweep()
		return err
	}
	// Wait for end of file; a parent that dies gives it too.
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			break
		}
		var m supMsg
		if json.Unmarshal(line, &m) == nil && m.Cgroup != "" {
			s.cgdir, s.cgrm = m.Cgroup, m.Remove
		}
	}
	if n := s.sweep(); n > 0 {
		fmt.Fprintf(os.Stderr, "%s[%d]: parent closed the control socket; killed %d processes left of child %d\n", supArg0, os.Getpid(), n, s.pid)
	}
	if s.cgrm {
		// The parent removes it too when it is alive; whoever is first.
		_ = os.Remove(s.cgdir)
	}
	return nil
}

// run starts the child on a locked thread and reaps it (and, as subreaper,
// whatever is re-parented to us while it runs). It never unlocks: the
// thread carries the dropped privileges and ends with the goroutine.
func (s *supervisor) run(started chan<- error) {
	runtime.LockOSThread()
	if err := dropPrivileges(); err != nil {
		started <- err
		return
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, supEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd := &exec.Cmd{
		Path:   s.cfg.Path,
		Args:   s.cfg.Args,
		Dir:    s.cfg.Dir,
		Env:    env,
		Stdin:  os.NewFile(supStdioFD, "stdin"),
		Stdout: os.NewFile(supStdioFD+1, "stdout"),
		Stderr: os.NewFile(supStdioFD+2, "stderr"),
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
			// Fires when this thread ends: when the supervisor dies.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	for i := range s.cfg.Extra {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(supExtraFD+i), "extra"))
	}
	if s.cgfd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = s.cgfd
	}
	if id := s.cfg.Identity; id != nil {
		groups := id.Groups
		if groups == nil {
			groups = []uint32{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id.UID, Gid: id.GID, Groups: groups}
	}
	err := cmd.Start()
	// Close our copies of the child's files: its stdin must see EOF when
	// the parent closes its end, a gate must see EOF if the parent dies.
	for _, f := range append([]*os.File{cmd.Stdin.(*os.File), cmd.Stdout.(*os.File), cmd.Stderr.(*os.File)}, cmd.ExtraFiles...) {
		f.Close()
	}
	if err != nil {
		started <- err
		return
	}
	s.pid = cmd.Process.Pid
	// Reported from here, so that it always comes before the exit.
	if err := s.out.Encode(supMsg{Pid: s.pid}); err != nil {
		// The parent is gone: the sweep kills the child, we reap it.
		started <- fmt.Errorf("report pid: %w", err)
	} else {
		started <- nil
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: nothing left to wait for (cannot happen before the
			// child itself is reaped).
			return
		}
		if pid == s.pid {
			code := int(ws)
			_ = s.out.Encode(supMsg{Exit: &code})
			close(s.reaped)
			return
		}
	}
}

// sweep kills everything of the child's group and every descendant of the
// supervisor, and reaps them. It returns how many processes it killed.
func (s *supervisor) sweep() int {
	killed := map[int]bool{}
	kill := func(pid int) {
		if pid > 0 && pid != os.Getpid() && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed[pid] = true
		}
	}
	deadline := time.Now().Add(supSweepMax)
	for {
		// The process group, while its leader (our child) is not reaped:
		// until then the pgid cannot name another group.
		leaderUnreaped := false
		select {
		case <-s.reaped:
		default:
			leaderUnreaped = s.pid > 0
		}
		if leaderUnreaped {
			if syscall.Kill(-s.pid, syscall.SIGKILL) == nil {
				killed[s.pid] = true
			}
		}
		inCgroup := 0
		if s.cgfd >= 0 {
			inCgroup += killCgroupFD(s.cgfd, kill)
		}
		if s.cgdir != "" {
			inCgroup += killCgroupDir(s.cgdir, kill)
		}
		children := childrenOf(os.Getpid())
		for _, pid := range children {
			kill(pid)
		}
		// Reap what has died (the run goroutine reaps our child itself
		// while it still waits; a process reaped here is not our child).
		if !leaderUnreaped {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
		if len(children) == 0 && inCgroup == 0 && !leaderUnreaped {
			return len(killed)
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "%s[%d]: gave up after %s: %d children, %d in the cgroup left\n", supArg0, os.Getpid(), supSweepMax, len(children), inCgroup)
			return len(killed)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killCgroupFD kills the cgroup open as dirfd and returns how many
// processes it still lists.
func killCgroupFD(dirfd int, kill func(int)) int {
	if fd, err := unix.Openat(dirfd, "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		_, _ = unix.Write(fd, []byte("1"))
		unix.Close(fd)
	}
	fd, err := unix.Openat(dirfd, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	f := os.NewFile(uintptr(fd), "cgroup.procs")
	defer f.Close()
	b, _ := readAll(f)
	return killListed(b, kill)
}

// killCgroupDir does the same for a cgroup known by its directory (each
// listed process is also killed on its own, for the count, and where
// cgroup.kill is missing or read-only).
func killCgroupDir(dir string, kill func(int)) int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	n := killListed(b, kill)
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	return n
}

func killListed(b []byte, kill func(int)) int {
	n := 0
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			kill(pid)
			n++
		}
	}
	return n
}

func readAll(f *os.File) ([]byte, error) {
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil || n == 0 {
			return out, nil
		}
	}
}

// childrenOf lists the live (non-zombie) processes whose parent is ppid.
func childrenOf(ppid int) []int {
	return procsWhere(func(st procStat) bool { return st.ppid == ppid })
}

// procsWhere lists the live (non-zombie) processes whose /proc/PID/stat
// satisfies keep.
func procsWhere(keep func(procStat) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err == nil && st.state != 'Z' && keep(st) {
			out = append(out, pid)
		}
	}
	return out
}

// procStat holds the fields of /proc/PID/stat soda uses.
type procStat struct {
	state     byte
	ppid      int
	pgid      int
	startTime uint64 // clock ticks after boot
}

func readProcStat(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return st, errors.New("malformed stat")
	}
	// Fields after the command: state(3) ppid(4) pgrp(5) ... starttime(22).
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return st, errors.New("malformed stat")
	}
	st.state = f[0][0]
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgid, _ = strconv.Atoi(f[2])
	st.startTime, _ = strconv.ParseUint(f[19], 10, 64)
	return st, nil
}

// dropPrivileges prepares the calling (locked) thread so that what it
// forks can never gain privileges: no ambient and no inheritable
// capabilities, an empty capability bounding set, and no_new_privs (so
// that neither set-user-ID binaries nor file capabilities grant anything
// on exec). The thread keeps its effective capabilities, which the fork
// needs to switch to the child's user; the switch itself (to a non-root
// user) clears them in the child. Emptying the bounding set needs
// CAP_SETPCAP: without it (an unprivileged soda-mcpd) the set stays as
// it is, which no_new_privs makes harmless; a root soda-mcpd that cannot
// empty it fails instead.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil || in != 1 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
				break
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	if data[0].Inheritable != 0 || data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("clear inheritable capabilities: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// lastCap is the highest capability number the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 63
	}
	return n
}

// ExitError reports how a supervised child ended other than with status 0.
type ExitError struct {
	// Status is the child's wait(2) status.
	Status syscall.WaitStatus
}

func (e *ExitError) Error() string {
	switch {
	case e.Status.Exited():
		return "exit status " + strconv.Itoa(e.Status.ExitStatus())
	case e.Status.Signaled():
		s := "signal: " + e.Status.Signal().String()
		if e.Status.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("wait status %#x", int(e.Status))
}

// ExitCode returns the exit status, or -1 if the child was killed by a
// signal (as os.ProcessState.ExitCode does).
func (e *ExitError) ExitCode() int {
	if e.Status.Exited() {
		return e.Status.ExitStatus()
	}
	return -1
}

// supervised is the parent's side of a child supervisor.
type supervised struct {
	cmd *exec.Cmd // the supervisor
	ctl *os.File
	in  *bufio.Reader
	pid int // the child's
}

// supStartTimeout bounds how long a supervisor may take to start the child.
const supStartTimeout = 30 * time.Second

// startSupervisor starts the supervisor that will start inner (prepared
// by its group) as user, and returns once the child runs.
func startSupervisor(inner *exec.Cmd, user *Identity) (*supervised, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor socketpair: %w", err)
	}
	if err := syscall.SetNonblock(fds[1], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("supervisor socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[0]), "supervisor-ctl")
	ours := os.NewFile(uintptr(fds[1]), "supervisor-ctl-parent")
	defer theirs.Close()
	cfg := supConfig{Path: inner.Path, Args: inner.Args, Dir: inner.Dir, Extra: len(inner.ExtraFiles), Identity: user}
	files := []*os.File{theirs, inner.Stdin.(*os.File), inner.Stdout.(*os.File), inner.Stderr.(*os.File)}
	files = append(files, inner.ExtraFiles...)
	if a := inner.SysProcAttr; a != nil && a.UseCgroupFD {
		dup, err := unix.FcntlInt(uintptr(a.CgroupFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			ours.Close()
			return nil, fmt.Errorf("supervisor: dup cgroup fd: %w", err)
		}
		cg := os.NewFile(uintptr(dup), "cgroup")
		defer cg.Close()
		cfg.CgroupFD = supExtraFD + len(inner.ExtraFiles)
		files = append(files, cg)
	}
	env := inner.Env
	if env == nil {
		env = os.Environ()
	}
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   []string{supArg0},
		Env:    append(slices.Clone(env), supEnv+"=1"),
		Stderr: os.Stderr,
		// fd 3 is the control socket, then the child's stdio and the rest.
		ExtraFiles:  files,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("start child supervisor: %w", err)
	}
	s := &supervised{cmd: cmd, ctl: ours, in: bufio.NewReader(ours)}
	fail := func(err error) (*supervised, error) {
		s.stop(nil)
		return nil, err
	}
	if err := s.send(supMsg{Config: &cfg}); err != nil {
		return fail(fmt.Errorf("configure child supervisor: %w", err))
	}
	_ = ours.SetReadDeadline(time.Now().Add(supStartTimeout))
	m, err := s.read()
	_ = ours.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return fail(fmt.Errorf("child supervisor: %w", err))
	case m.Error != "":
		return fail(errors.New(m.Error))
	case m.Pid <= 0:
		return fail(fmt.Errorf("child supervisor: unexpected message %+v", m))
	}
	s.pid = m.Pid
	return s, nil
}

func (s *supervised) send(m supMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = s.ctl.Write(append(b, '\n'))
	return err
}

// tell sends m, ignoring errors (a supervisor that is gone needs nothing).
func (s *supervised) tell(m supMsg) { _ = s.send(m) }

func (s *supervised) read() (supMsg, error) {
	var m supMsg
	line, err := s.in.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return m, errors.New("supervisor exited (see its stderr)")
		}
		return m, err
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("bad message %q: %w", line, err)
	}
	return m, nil
}

// wait returns how the child ended: nil, an *ExitError, or the reason the
// supervisor stopped reporting.
func (s *supervised) wait() error {
	for {
		m, err := s.read()
		if err != nil {
			return fmt.Errorf("child supervisor: %w", err)
		}
		if m.Exit != nil {
			if *m.Exit == 0 {
				return nil
			}
			return &ExitError{Status: syscall.WaitStatus(*m.Exit)}
		}
	}
}

// stop closes the control socket, which makes the supervisor kill what is
// left of the child's group, and waits for it to exit.
func (s *supervised) stop(cgroup.Group) {
	s.ctl.Close()
	done := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(supSweepMax + 2*time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}
