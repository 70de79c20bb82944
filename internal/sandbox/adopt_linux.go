package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/sandbox/wire"
	"github.com/soda-project/soda/internal/throttle"
)

// Handing a live sandbox to a successor. A supervisor (sodad) that
// restarts must not leave a sandbox whose egress nobody serves, and its
// agent should keep working. A sandbox of an adoptable engine
// (Config.Adoptable) outlives its starter: its init has no parent-death
// signal and ends only when its life socket's host end is closed
// everywhere (wire.LifeExit). The supervisor keeps copies of the few
// descriptors that make up the host side (Handover: the life socket, the
// egress control socket, init's status pipe, the uid's and the scope's
// lock files) where they survive it, in systemd's file descriptor store,
// and a record of the rest (HandoverState). Its successor gets the
// descriptors back and Adopts the sandbox: it serves the egress control
// socket with the recorded allow-list, owns the scope and the uid through
// the same open lock files (no sweeper sees them free in between), and
// learns the command's exit status from init's LifeExit message.
//
// What does not survive: connections the old proxy was relaying (they are
// cut; new ones queue on the control socket until the successor serves
// it) and the kept audit records (the successor's start with an "adopted"
// record; the journal has them all).

// State returns what a successor needs to adopt sb now (the allow-list
// as it is, after any SetEgress), without the files.
func (sb *Sandbox) State() HandoverState {
	st := HandoverState{ID: sb.ID, Pid: sb.pid, NoNetwork: sb.spec.NoNetwork, Limits: sb.spec.Limits,
		Started: sb.started, Seq: sb.seq.Load(), Egress: sb.spec.Egress}
	if sb.adopted != nil {
		st.PidStart = sb.adopted.start
	} else {
		st.PidStart, _ = pidStart(sb.pid)
	}
	if sb.proxy != nil {
		st.Egress = sb.proxy.CurrentPolicy()
	}
	if g, ok := sb.group.(cgroup.HandoverGroup); ok {
		st.Unit = g.Unit()
	}
	if sb.uid != nil {
		st.UID = sb.uid.uid
	}
	if sb.spec.Timeout > 0 {
		st.Deadline = sb.started.Add(sb.spec.Timeout)
		if sb.adopted != nil {
			st.Deadline = sb.adopted.deadline
		}
	}
	if w := sb.watch; w != nil {
		ws := &WatchState{ReadWrite: w.rw, Unprotect: w.unprotect, Missing: w.missing, Placeholders: w.placeholders}
		for d := range w.gitDirs {
			ws.GitDirs = append(ws.GitDirs, d)
		}
		st.Watch = ws
	}
	return st
}

// Handover returns sb's state and copies of the descriptors a successor
// needs (keyed by the Handover* names; the caller closes them once stored).
// Only a running sandbox of an adoptable engine in a systemd scope with an
// owner lock can be handed over; a live sandbox (Spec.Persistent) cannot.
func (sb *Sandbox) Handover() (HandoverState, map[string]*os.File, error) {
	if !sb.adoptable {
		return HandoverState{}, nil, errors.New("sandbox handover: the engine is not adoptable (Config.Adoptable)")
	}
	if sb.spec.Persistent {
		return HandoverState{}, nil, ErrLiveNotHandable
	}
	g, ok := sb.group.(cgroup.HandoverGroup)
	if !ok || sb.cgroupDegraded {
		return HandoverState{}, nil, fmt.Errorf("sandbox handover: its cgroup (%v) is not a systemd scope", sb.group)
	}
	files := map[string]*os.File{}
	fail := func(err error) (HandoverState, map[string]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return HandoverState{}, nil, fmt.Errorf("sandbox handover: %w", err)
	}
	lock, err := g.LockFile()
	if err != nil {
		return fail(err)
	}
	files[HandoverScope] = lock
	status := sb.status
	select {
	case <-sb.statusDone:
		status = nil // ended: nothing writes on it any more (no repository guard)
	default:
	}
	for name, f := range map[string]*os.File{HandoverLife: sb.life, HandoverStatus: status} {
		if f == nil {
			continue
		}
		d, err := dupFile(f, name)
		if name == HandoverStatus && errors.Is(err, os.ErrClosed) {
			// Its reader closed it between the check above and here:
			// it ended (waitReady closes the pipe, then statusDone).
			continue
		}
		if err != nil {
			return fail(err)
		}
		files[name] = d
	}
	if sb.uid != nil {
		d, err := dupFile(sb.uid.lock, HandoverUID)
		if err != nil {
			return fail(err)
		}
		files[HandoverUID] = d
	}
	if sb.egress != nil {
		d, err := sb.egress.File()
		if err != nil {
			return fail(fmt.Errorf("copy the egress control socket: %w", err))
		}
		files[HandoverEgress] = d
	}
	if files[HandoverLife] == nil {
		return fail(errors.New("the sandbox has ended"))
	}
	return sb.State(), files, nil
}

// dupFile returns a close-on-exec copy of f.
func dupFile(f *os.File, name string) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", name, err)
	}
	dup := -1
	var derr error
	if err := rc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		// A file closed under it gives internal/poll's ErrFileClosing,
		// which os does not wrap as os.ErrClosed here.
		if strings.Contains(err.Error(), "use of closed file") {
			err = os.ErrClosed
		}
		return nil, fmt.Errorf("copy %s: %w", name, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("copy %s: %w", name, derr)
	}
	return os.NewFile(uintptr(dup), name), nil
}

// Detach lets go of a sandbox that was handed over (Handover, the copies
// stored): Wait returns ErrDetached, the proxy stops serving (connections
// it was relaying are cut), this process's descriptors are closed, and
// the sandbox keeps running for the successor. A sandbox being stopped
// is not detached.
func (sb *Sandbox) Detach() {
	sb.detachOnce.Do(func() { close(sb.detachCh) })
}

// detach is Wait's side of Detach.
func (sb *Sandbox) detach() error {
	sb.log.Info("sandbox detached: handed over to a successor")
	sb.record(Record{Event: "detached", Detail: "handed over to a successor"})
	if sb.cancelProxy != nil {
		sb.cancelProxy()
		sb.egress.Close()
		<-sb.proxyDone
		sb.cancelProxy = nil
	} else if sb.egress != nil {
		sb.egress.Close()
	}
	if sb.status != nil {
		sb.status.Close()
	}
	if g, ok := sb.group.(cgroup.HandoverGroup); ok {
		g.Detach()
	}
	sb.group = nil
	sb.placer = nil
	if sb.life != nil {
		sb.life.Close()
		sb.life = nil
	}
	if sb.adopted != nil {
		sb.adopted.close()
	}
	sb.uid.release()
	sb.uid = nil
	return ErrDetached
}

// adoption is what an adopted sandbox has instead of its init's process.
type adoption struct {
	pidfd    int
	start    uint64
	deadline time.Time
	life     *os.File
	code     int
	reported bool
	limits   wire.LifeExit // init's report: the cgroup's limit counters
}

// wait returns once init has ended: its life socket reads the end (after
// its LifeExit, unless it was killed), and its pidfd says it exited.
func (a *adoption) wait() error {
	_ = a.readExit()
	fds := []unix.PollFd{{Fd: int32(a.pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, 5000)
		if !errors.Is(err, unix.EINTR) {
			return nil
		}
	}
}

// readExit reads the life socket to its end, keeping init's LifeExit.
func (a *adoption) readExit() error {
	buf := make([]byte, 512)
	for {
		n, err := a.life.Read(buf)
		if err != nil || n == 0 {
			return err
		}
		var m wire.LifeExit
		if json.Unmarshal(buf[:n], &m) == nil {
			a.code, a.reported, a.limits = m.Code, true, m
		}
	}
}

// status is how init ended: its report, or (none: it was killed) SIGKILL.
func (a *adoption) status() (int, string) {
	if a.reported {
		return a.code, ""
	}
	return 128 + int(unix.SIGKILL), unix.SignalName(unix.SIGKILL)
}

func (a *adoption) signal(sig syscall.Signal) error {
	if a.pidfd < 0 {
		return os.ErrProcessDone
	}
	return unix.PidfdSendSignal(a.pidfd, sig, nil, 0)
}

func (a *adoption) close() {
	if a.pidfd >= 0 {
		unix.Close(a.pidfd)
		a.pidfd = -1
	}
}

// Adopt takes over the live sandbox st describes from the supervisor that
// handed it over, with the descriptors of its Handover (which Adopt owns
// from now on, used or not). It checks that init still runs (the same
// process, in the recorded scope) and that the lock files are the ones
// recorded; then it serves the sandbox's egress with the recorded
// allow-list, and Wait, Stop, Signal and SetEgress work as for a sandbox
// Start made. A sandbox whose init has ended cannot be adopted (the error
// says so); the caller then cleans up after it.
func (e *Linux) Adopt(ctx context.Context, st HandoverState, files map[string]*os.File) (_ *Sandbox, err error) {
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if !e.cfg.Adoptable || e.cfg.Cgroups != CgroupSystemd {
		closeAll()
		return nil, errors.New("sandbox adopt: the engine is not adoptable (Config.Adoptable with systemd scopes)")
	}
	if !validID(st.ID) {
		closeAll()
		return nil, fmt.Errorf("sandbox adopt: invalid id %q", st.ID)
	}
	log := e.cfg.Log.With("sandbox", st.ID)
	spec := Spec{ID: st.ID, Egress: st.Egress, NoNetwork: st.NoNetwork, Limits: st.Limits}
	sb := &Sandbox{ID: st.ID, spec: spec, log: log, audit: e.cfg.Audit, started: st.Started, pid: st.Pid,
		stopCh: make(chan struct{}), detachCh: make(chan struct{}), logGate: throttle.New(logRate), quietEgress: e.cfg.QuietEgress, adoptable: true}
	sb.seq.Store(st.Seq)
	a := &adoption{pidfd: -1, start: st.PidStart, deadline: st.Deadline}
	defer func() {
		if err != nil {
			sb.cleanupAdopt(files)
			closeAll()
		}
	}()
	life := files[HandoverLife]
	if life == nil {
		return nil, errors.New("sandbox adopt: no life socket: the sandbox ended")
	}
	// Its init: the same process (pidfd, then its start time), alive.
	pidfd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox adopt: init (pid %d) is gone: %w", st.Pid, err)
	}
	a.pidfd = pidfd
	if start, err := pidStart(st.Pid); err != nil || start != st.PidStart {
		return nil, fmt.Errorf("sandbox adopt: pid %d is not the sandbox's init any more", st.Pid)
	}
	scopes, err := e.scopePlacer(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox adopt: %w", err)
	}
	if want := scopes.UnitName(st.ID); st.Unit != want {
		return nil, fmt.Errorf("sandbox adopt: recorded unit %q, want %q", st.Unit, want)
	}
	g, err := scopes.Adopt(st.ID, st.Pid, files[HandoverScope])
	if err != nil {
		return nil, fmt.Errorf("sandbox adopt: %w", err)
	}
	delete(files, HandoverScope) // the group's now
	sb.group = g
	if e.cfg.Privileged {
		lease, err := e.uids.adopt(st.UID, files[HandoverUID])
		if err != nil {
			return nil, fmt.Errorf("sandbox adopt: %w", err)
		}
		delete(files, HandoverUID)
		sb.uid = lease
	}
	if !st.NoNetwork {
		f := files[HandoverEgress]
		if f == nil {
			return nil, errors.New("sandbox adopt: no egress control socket")
		}
		fc, err := net.FileConn(f)
		if err != nil {
			return nil, fmt.Errorf("sandbox adopt: egress control socket: %w", err)
		}
		uc, ok := fc.(*net.UnixConn)
		if !ok {
			fc.Close()
			return nil, errors.New("sandbox adopt: the egress descriptor is not a Unix socket")
		}
		sb.egress = uc
	}
	if w := st.Watch; w != nil {
		sb.watch = &plantWatch{rw: w.ReadWrite, unprotect: w.Unprotect, missing: w.Missing, placeholders: w.Placeholders, gitDirs: map[string]bool{}}
		for _, d := range w.GitDirs {
			sb.watch.gitDirs[d] = true
		}
	}
	if !st.Deadline.IsZero() {
		sb.spec.Timeout = max(time.Until(st.Deadline), time.Millisecond)
	}
	sb.life, a.life = life, life
	delete(files, HandoverLife)
	sb.adopted = a
	if !st.NoNetwork {
		sb.startProxy(ctx, e.cfg.Resolver, e.hostAddrs(log.With("part", "egress")))
	}
	sb.statusDone = make(chan struct{})
	if f := files[HandoverStatus]; f != nil {
		delete(files, HandoverStatus)
		sb.status = f
		go sb.readGuard(f)
	} else {
		close(sb.statusDone)
	}
	closeAll() // what is left is not needed (an egress socket already wrapped)
	sb.record(Record{Event: "adopted", Pid: st.Pid, Grants: grantStrings(st.Egress), Detail: "taken over from the previous supervisor"})
	log.Info("sandbox adopted", "pid", st.Pid, "unit", st.Unit)
	return sb, nil
}

// cleanupAdopt releases what a failed Adopt took, without touching the
// sandbox (its scope and uid stay locked by the descriptors not yet
// taken, which the caller closes).
func (sb *Sandbox) cleanupAdopt(files map[string]*os.File) {
	if g, ok := sb.group.(cgroup.HandoverGroup); ok {
		g.Detach()
	}
	sb.uid.release()
	if sb.egress != nil {
		sb.egress.Close()
	}
	if sb.adopted != nil {
		sb.adopted.close()
	} else if sb.life != nil {
		sb.life.Close()
	}
}

// readGuard reads the repository guard's records from init's status
// pipe until its end (an adopted sandbox's; waitReady reads a new one's).
func (sb *Sandbox) readGuard(f *os.File) {
	defer close(sb.statusDone)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		var m wire.Status
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Event != "" {
			sb.guardRecord(m)
		}
	}
}

// pidStart reads the start time of process pid (field 22 of its stat).
func pidStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it follow its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// adopt takes the lease of uid through lock, the predecessor's lock file.
func (p *uidPool) adopt(uid int, lock *os.File) (*uidLease, error) {
	if lock == nil {
		return nil, fmt.Errorf("uid %d: no lock file passed", uid)
	}
	if uid < p.base || uid >= p.base+p.count {
		return nil, fmt.Errorf("uid %d is not in the range %d+%d", uid, p.base, p.count)
	}
	want := filepath.Join(p.dir, strconv.Itoa(uid))
	var held, now unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &held); err != nil {
		return nil, fmt.Errorf("uid %d lock: %w", uid, err)
	}
	if err := unix.Stat(want, &now); err != nil || held.Dev != now.Dev || held.Ino != now.Ino {
		return nil, fmt.Errorf("uid %d: the descriptor passed is not its lock file %s", uid, want)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("uid %d: its lock is held by another process: %w", uid, err)
	}
	return &uidLease{uid: uid, lock: lock}, nil
}
