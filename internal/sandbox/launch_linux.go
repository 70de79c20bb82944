package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox/wire"
	"github.com/soda-project/soda/internal/throttle"
	"github.com/soda-project/soda/internal/workhome"
)

// startTimeout bounds the time from clone to the command's exec.
const startTimeout = 15 * time.Second

// proxyDrain is how long teardown lets the egress proxy finish the
// connections of a sandbox whose processes are all gone.
const proxyDrain = 2 * time.Second

// Sandbox is a running sandbox.
type Sandbox struct {
	ID     string
	spec   Spec
	log    *slog.Logger
	audit  func(Record)
	cmd    *exec.Cmd
	group  cgroup.Group
	placer cgroup.Placer
	// groupLock marks the cgroup directories the engine makes itself as a
	// live owner's (cgroup.LockGroup); nil with systemd scopes.
	groupLock *cgroup.GroupLock
	// home is the engine's home (Linux.NewHome) this sandbox took as
	// Spec.Home, removed at its teardown.
	home   *workhome.Home
	uid    *uidLease
	idmaps []*idmapNS
	proxy  *egress.Proxy
	egress *net.UnixConn
	life   *os.File // the host's end of the life socket (wire.LifeExit)
	pid    int      // init's pid
	// adopted is set on a sandbox taken over from another supervisor
	// (Adopt): init is not our child (adopt_linux.go).
	adopted   *adoption
	adoptable bool // the engine's Config.Adoptable

	cgroupDegraded bool               // the cgroup layer was waived (--allow-degraded)
	pendingScope   chan scopeResult   // a systemd placer being connected, not taken yet
	logGate        *throttle.Throttle // egress lines on the log (the audit sink has all)
	quietEgress    bool               // egress lines at debug level only (Config.QuietEgress)
	seq            atomic.Uint64      // the last audit record's sequence number

	cancelProxy context.CancelFunc
	proxyDone   chan struct{}
	started     time.Time
	watch       *plantWatch // what no mount protects (protect_linux.go)
	execCh      execChannel // Spec.Persistent: commands sent to init (exec_linux.go)
	stopOnce    sync.Once
	stopCh      chan struct{} // closed by Stop
	waitOnce    sync.Once
	detachCh    chan struct{} // closed by Detach
	detachOnce  sync.Once
	exit        ExitStatus
	waitErr     error

	statusDone chan struct{} // closed when init's status pipe ends (repoguard_linux.go)
	status     *os.File      // its read end, once the command started
}

// Start launches spec's command in a new sandbox. It returns once the
// command has been started with every layer in place, or an error that
// names the layer that could not be applied (*LayerError).
//
// It prepares init's configuration, the identity the command runs as and
// the cgroup; clones init with the files it talks over; places it in its
// cgroup while init builds the sandbox; then starts the host side of
// egress and releases init, which forks the command.
func (e *Linux) Start(ctx context.Context, spec Spec) (_ *Sandbox, err error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	if e.cfg.ClosedNetwork && !spec.NoNetwork {
		return nil, errors.New("sandbox: this engine runs closed-network sandboxes only (Spec.NoNetwork)")
	}
	if spec.RootFS != "" && guarded(spec) {
		if err := imageInitError(e.cfg.InitPath, e.initInterp); err != nil {
			return nil, err
		}
	}
	if !spec.Knobs.unavailable(LayerCgroup) {
		// The placement below waits for the kernel less if a v1
		// migration starts now (see cgroup.Warmer).
		e.warmer.Warm()
	}
	sb := e.newSandbox(spec)
	defer func() {
		if err != nil {
			sb.cleanup(context.WithoutCancel(ctx))
			sb.record(Record{Event: "refused", Detail: err.Error()})
		}
	}()
	sb.recordStart()

	cfg, owners, err := e.initConfig(sb)
	if err != nil {
		return nil, err
	}
	root := e.cfg.Privileged
	if err := e.chooseIdentity(sb, &cfg, owners); err != nil {
		return nil, err
	}

	// The cgroup, before anything runs.
	// Without systemd, init is cloned into a cgroup v2 directory made now;
	// with it, the scope is made once init runs (and builds the sandbox
	// meanwhile), since systemd needs a pid to make a scope.
	scope := e.cfg.Cgroups == CgroupSystemd
	if scope && !spec.Knobs.unavailable(LayerCgroup) {
		e.connectScope(ctx, sb)
	}
	tPrep := time.Since(sb.started)
	if !scope {
		if err := sb.newGroup(ctx, root, false); err != nil {
			return nil, err
		}
	}
	tGroup := time.Since(sb.started)

	link, err := sb.openInitLink()
	if err != nil {
		return nil, err
	}
	defer link.close()
	cmd, err := e.initCmd(sb, &cfg, link)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, namespaceError(err, cfg.UserNS)
	}
	tClone := time.Since(sb.started)
	sb.cmd, sb.pid = cmd, cmd.Process.Pid
	link.closeChildEnds() // init holds them now

	// Init builds the sandbox while we place it in its cgroup; it forks
	// the command only after wire.PlacedByte.
	if err := json.NewEncoder(link.cfgW).Encode(cfg); err != nil {
		return nil, fmt.Errorf("send sandbox configuration: %w", err)
	}
	if err := sb.place(ctx, root, scope, cmd.Process.Pid); err != nil {
		return nil, err
	}
	tPlaced := time.Since(sb.started)

	if err := e.release(ctx, sb, link); err != nil {
		return nil, err
	}
	sb.log.Debug("sandbox started", "prepare", tPrep, "cgroup", tGroup-tPrep, "clone", tClone-tGroup,
		"place", tPlaced-tClone, "ready", time.Since(sb.started)-tPlaced, "total", time.Since(sb.started))
	return sb, nil
}

// newSandbox returns the Sandbox that Start builds for spec (normalized),
// holding the engine's home it takes as Spec.Home.
func (e *Linux) newSandbox(spec Spec) *Sandbox {
	sb := &Sandbox{ID: spec.ID, spec: spec, log: e.cfg.Log.With("sandbox", spec.ID), audit: e.cfg.Audit,
		started: time.Now(), stopCh: make(chan struct{}), detachCh: make(chan struct{}), logGate: throttle.New(logRate),
		quietEgress: e.cfg.QuietEgress, adoptable: e.cfg.Adoptable}
	sb.home = e.takeHome(spec.Home)
	return sb
}

// recordStart records the start request, sets up the watch on what no
// mount protects in the read-write grants, and warns of unprotected paths.
func (sb *Sandbox) recordStart() {
	spec := &sb.spec
	sb.record(Record{Event: "start", Image: spec.Image, Argv: spec.Argv, ReadOnly: spec.ReadOnly, ReadWrite: spec.ReadWrite,
		Grants: grantStrings(spec.Egress), Limits: &spec.Limits, Degradable: spec.AllowDegraded, Unprotected: spec.Unprotect})
	if len(spec.ReadWrite) > 0 {
		sb.watch = newPlantWatch(spec.ReadWrite, spec.Unprotect)
	}
	if len(spec.Unprotect) > 0 {
		sb.log.Warn("sandbox paths unprotected: the host may run what the command writes there", "unprotected", strings.Join(spec.Unprotect, ":"))
	}
}

// initConfig returns init's configuration for sb, short of the identity
// the command runs as (chooseIdentity), and the owners of the granted
// paths, for the idmap. It refuses namespace layers a test knob made
// unavailable, and paths that changed since they were resolved.
func (e *Linux) initConfig(sb *Sandbox) (wire.Config, map[string][2]uint32, error) {
	spec := &sb.spec
	cfg := wire.Config{
		Version: wire.Version, ID: spec.ID, Argv: spec.Argv, Dir: spec.Dir, ReadOnly: spec.ReadOnly, ReadWrite: spec.ReadWrite,
		Home: spec.Home, TmpSize: spec.Limits.TmpSize, HomeSize: spec.Limits.HomeSize, NoFile: spec.Limits.NoFile, FileSize: spec.Limits.FileSize,
		NProc: uint64(spec.Limits.TasksMax), LandlockMin: spec.LandlockMinABI, Degraded: spec.AllowDegraded, Unavailable: spec.Knobs.Unavailable,
		DNS: !spec.NoNetwork, NoNetwork: spec.NoNetwork, StdinIsTTY: spec.TTY, HideExtra: spec.Hide, Unprotect: spec.Unprotect, Persistent: spec.Persistent, RootFS: spec.RootFS,
		Adoptable: e.cfg.Adoptable, WorkspaceSize: spec.WorkspaceSize, Masks: spec.Masks,
	}
	kept, dropped := FilterEnv(spec.Env)
	cfg.Env = append(append(baseEnv(spec), spec.TrustedEnv...), kept...)
	if len(dropped) > 0 {
		sb.record(Record{Event: "env", Dropped: dropped})
	}
	if !spec.NoNetwork {
		cfg.RelayPorts = append([]uint16{spec.Egress.ProxyPort}, spec.Egress.MCPPorts...)
	}
	for _, l := range []Layer{LayerNetNS, LayerMountNS, LayerPIDNS} {
		if spec.Knobs.unavailable(l) {
			return wire.Config{}, nil, &LayerError{Layer: l, Err: errors.New("unavailable (test knob)")}
		}
	}

	ids, owners, err := checkGrants(spec)
	if err != nil {
		return wire.Config{}, nil, err
	}
	cfg.Identities = ids
	if spec.Knobs.AfterCheck != nil {
		spec.Knobs.AfterCheck()
	}
	return cfg, owners, nil
}

// chooseIdentity sets who the command runs as in cfg. As root, that is a
// uid leased for sb, with the grants it does not own idmapped to it (owners
// are their owners); otherwise the caller's own ids, in a user namespace.
func (e *Linux) chooseIdentity(sb *Sandbox, cfg *wire.Config, owners map[string][2]uint32) error {
	if !e.cfg.Privileged {
		if sb.spec.Knobs.unavailable(LayerUserNS) {
			return &LayerError{Layer: LayerUserNS, Err: errors.New("unavailable (test knob)")}
		}
		cfg.UID, cfg.GID, cfg.UserNS = os.Getuid(), os.Getgid(), true
		return nil
	}
	var err error
	sb.uid, err = e.uids.lease()
	if err != nil {
		return fmt.Errorf("sandbox uid: %w", err)
	}
	// The home needs no chown: init copies it into the sandbox's
	// own tmpfs, owned by cfg.UID (mountHome).
	cfg.UID, cfg.GID = sb.uid.uid, sb.uid.uid
	return sb.idmapGrants(e.cfg.InitPath, cfg, owners)
}

// connectScope connects to systemd for sb's scope while the rest is
// prepared and init starts; place takes the result from sb.pendingScope.
func (e *Linux) connectScope(ctx context.Context, sb *Sandbox) {
	sb.pendingScope = make(chan scopeResult, 1)
	go func() {
		p, err := e.scopePlacer(ctx)
		if err != nil {
			sb.pendingScope <- scopeResult{err: err}
			return
		}
		sb.pendingScope <- scopeResult{placer: p.WithLimits(sb.childLimits())}
	}()
}

// initLink is what Start opens to talk with init: the configuration and
// status pipes, and init's ends of the sockets whose host ends the
// Sandbox keeps (sb.egress, sb.life, the exec channel).
type initLink struct {
	cfgR, cfgW   *os.File // configuration (host → init), then wire.PlacedByte
	statR, statW *os.File // status lines (init → host)
	egressChild  *os.File // the egress control socket, or /dev/null without network
	lifeChild    *os.File // the life socket (wire.LifeExit)
	execChild    *os.File // the exec channel (Spec.Persistent), else nil
}

// openInitLink opens the pipes and sockets of an initLink, setting sb's
// host ends of the egress and life sockets. On error, it closes the pipes
// it made; sb.cleanup closes the host ends.
func (sb *Sandbox) openInitLink() (_ *initLink, err error) {
	l := &initLink{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.cfgR, l.cfgW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("configuration pipe: %w", err)
	}
	if l.statR, l.statW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	if sb.egress, l.egressChild, err = egressSocket(sb.spec.NoNetwork); err != nil {
		return nil, err
	}
	if sb.life, l.lifeChild, err = lifeSocket(); err != nil {
		return nil, err
	}
	return l, nil
}

// closeChildEnds closes the ends Start passed to init once it has cloned.
func (l *initLink) closeChildEnds() {
	for _, f := range []*os.File{l.cfgR, l.statW, l.egressChild, l.lifeChild, l.execChild} {
		if f != nil {
			f.Close()
		}
	}
}

// close closes every file of l, last opened first (closing one again only
// returns an error, ignored here). waitReady keeps a copy of statR.
func (l *initLink) close() {
	for _, f := range []*os.File{l.execChild, l.lifeChild, l.egressChild, l.statW, l.statR, l.cfgW, l.cfgR} {
		if f != nil {
			f.Close()
		}
	}
}

// initCmd returns the command that clones init for sb, in its cgroup
// directory when the engine made one, with link's child ends, the idmap
// namespaces and, with Spec.Persistent, the exec channel (opened
// here, into link) passed as extra files named in wire.FDsEnv.
func (e *Linux) initCmd(sb *Sandbox, cfg *wire.Config, link *initLink) (*exec.Cmd, error) {
	cmd := initCommand(e.cfg.InitPath, &sb.spec, cfg)
	if sb.group != nil {
		if err := sb.group.Prepare(cmd); err != nil {
			return nil, &LayerError{Layer: LayerCgroup, Err: err}
		}
	}
	files := []*os.File{link.cfgR, link.statW, link.egressChild, link.lifeChild}
	for _, m := range sb.idmaps {
		files = append(files, m.fd)
	}
	if sb.spec.Persistent {
		execChild, err := sb.openExec()
		if err != nil {
			return nil, err
		}
		link.execChild = execChild
		files = append(files, execChild) // last: init finds it there
	}
	fds := make([]string, len(files))
	for i := range files {
		fds[i] = strconv.Itoa(3 + len(cmd.ExtraFiles) + i)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
	cmd.Env = append(cmd.Env, wire.FDsEnv+"="+strings.Join(fds, ","))
	return cmd, nil
}

// release lets init, placed in its cgroup, fork the command: the host side
// of egress starts first, since init relays as soon as it is released. It
// returns once the command started, the idmap namespaces closed.
func (e *Linux) release(ctx context.Context, sb *Sandbox, link *initLink) error {
	if !sb.spec.NoNetwork {
		sb.startProxy(ctx, e.cfg.Resolver, e.hostAddrs(sb.log.With("part", "egress")))
	}
	if _, err := link.cfgW.Write([]byte{wire.PlacedByte}); err != nil {
		return fmt.Errorf("release sandbox init: %w", err)
	}
	link.cfgW.Close()
	if err := sb.waitReady(ctx, link.statR); err != nil {
		return err
	}
	if sb.spec.Persistent {
		go sb.readExecReplies()
	}
	// The idmapped mounts are made: they keep their user namespaces,
	// and the host's descriptors can go.
	sb.closeIDMaps()
	return nil
}

// lifeSocket makes the life socket (wire.LifeExit): the host's end, and
// init's to pass on.
func lifeSocket() (host, child *os.File, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("life socket: %w", err)
	}
	// The host's end is non-blocking, so that reads can have a deadline
	// (readLifeExit); os.File still blocks reads on it through the poller.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, nil, fmt.Errorf("life socket: %w", err)
	}
	return os.NewFile(uintptr(pair[0]), "life-host"), os.NewFile(uintptr(pair[1]), "life-child"), nil
}

// readLifeExit reads what init wrote on the life socket before it exited
// (a wire.LifeExit), without waiting: init is gone, so it is there or
// never will be.
func readLifeExit(life *os.File) (wire.LifeExit, bool) {
	var m wire.LifeExit
	if life == nil {
		return m, false
	}
	_ = life.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer life.SetReadDeadline(time.Time{})
	buf := make([]byte, 512)
	n, err := life.Read(buf)
	if err != nil || n == 0 || json.Unmarshal(buf[:n], &m) != nil {
		return m, false
	}
	return m, true
}

// closeIDMaps closes the idmap namespaces.
func (sb *Sandbox) closeIDMaps() {
	for _, m := range sb.idmaps {
		m.close()
	}
	sb.idmaps = nil
}

// controlSocket makes the egress control socket: the host's end as a
// connection, init's end as a file to pass on.
func controlSocket() (*net.UnixConn, *os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("egress control socket: %w", err)
	}
	hostEnd := os.NewFile(uintptr(pair[0]), "egress-host")
	fc, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		unix.Close(pair[1])
		return nil, nil, fmt.Errorf("egress control socket: %w", err)
	}
	return fc.(*net.UnixConn), os.NewFile(uintptr(pair[1]), "egress-child"), nil
}

// place puts the running init (pid) in the sandbox's cgroup (with scope,
// making the scope first) and checks that the limits apply to it.
func (sb *Sandbox) place(ctx context.Context, root, scope bool, pid int) error {
	if scope {
		if err := sb.newGroup(ctx, root, true); err != nil {
			return err
		}
	}
	if err := sb.group.Started(ctx, pid); err != nil {
		return &LayerError{Layer: LayerCgroup, Err: err}
	}
	if sb.cgroupDegraded {
		return nil
	}
	if err := checkLimits(pid, sb.spec.Limits, v1Paths(sb.group)); err != nil {
		if !slices.Contains(sb.spec.AllowDegraded, LayerCgroup) {
			return &LayerError{Layer: LayerCgroup, Err: err}
		}
		sb.log.Warn("sandbox layer NOT fully applied (allowed by --allow-degraded)", "layer", LayerCgroup, "reason", err)
		sb.record(Record{Event: "layer", Layer: LayerCgroup, State: "degraded", Detail: err.Error()})
	}
	return nil
}

// checkGrants records what the home and the granted paths are now: their
// identity (device, inode), which init checks before it mounts them (a
// path swapped for a symlink or another directory after this check is
// refused, not followed), and their owner, for the idmap.
func checkGrants(spec *Spec) (ids map[string][2]uint64, owners map[string][2]uint32, err error) {
	ids, owners = map[string][2]uint64{}, map[string][2]uint32{}
	for _, p := range append(append([]string{spec.Home}, spec.ReadOnly...), spec.ReadWrite...) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, nil, fmt.Errorf("granted path %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, nil, fmt.Errorf("granted path %s changed after it was resolved (now not a directory)", p)
		}
		ids[p] = [2]uint64{st.Dev, st.Ino}
		owners[p] = [2]uint32{st.Uid, st.Gid}
	}
	return ids, owners, nil
}

// initCommand is the sandbox's init: the init binary initPath, executed in
// new namespaces (with a user namespace mapping only the caller's ids when
// not root).
func initCommand(initPath string, spec *Spec, cfg *wire.Config) *exec.Cmd {
	var pdeath syscall.Signal
	if !cfg.Adoptable {
		// An adoptable init outlives us (the life socket ends it).
		pdeath = syscall.SIGKILL
	}
	cmd := &exec.Cmd{Path: initPath, Args: []string{wire.InitArg0}}
	// One P: init relays sockets by passing them, copies nothing, and every
	// thread it has costs a psx round when it confines itself (about 1 ms
	// less from clone to the command's exec, measured with sodactl -v).
	cmd.Env = []string{wire.RoleEnv + "=" + wire.RoleInit, "GOMAXPROCS=1"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Setsid:     true,
		Pdeathsig:  pdeath,
	}
	if cfg.UserNS {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: cfg.UID, HostID: cfg.UID, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: cfg.GID, HostID: cfg.GID, Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
		// Init needs these in the new user namespace to build the
		// sandbox; it drops them all before the command starts.
		cmd.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP}
	}
	return cmd
}

// startProxy serves the egress control socket: the host side of every
// connection the sandbox makes.
func (sb *Sandbox) startProxy(ctx context.Context, resolver egress.Resolver, local egress.LocalAddrs) {
	log := sb.log.With("part", "egress")
	sb.proxy = &egress.Proxy{Policy: sb.spec.Egress, Resolver: resolver, Log: log,
		Audit: func(ev egress.Event) { sb.record(Record{Event: "egress", Egress: &ev}) }}
	// The host's own addresses (the engine's watch; nil: read per CONNECT).
	sb.proxy.Local = local
	sb.proxy.Terminate = sb.spec.Terminate
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sb.cancelProxy = cancel
	sb.proxyDone = make(chan struct{})
	go func() {
		defer close(sb.proxyDone)
		if err := sb.proxy.ServeControl(pctx, sb.egress); err != nil && pctx.Err() == nil {
			sb.log.Warn("egress control ended", "err", err)
		}
	}()
}

// waitReady reads init's status lines until the command started.
func (sb *Sandbox) waitReady(ctx context.Context, statR *os.File) error {
	done := make(chan error, 1)
	// The repository guard writes on after the command started: read
	// until the end (repoguard_linux.go).
	statR, sb.statusDone = keepStatus(statR)
	sb.status = statR
	go func() {
		defer close(sb.statusDone)
		defer statR.Close()
		ready := false
		sc := bufio.NewScanner(statR)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			var m wire.Status
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				if ready {
					continue
				}
				done <- fmt.Errorf("sandbox init: bad status line %q", truncate(sc.Text(), 200))
				return
			}
			switch {
			case m.Event != "":
				sb.guardRecord(m)
			case ready:
			case m.Error != "":
				var err error = errors.New(m.Error)
				switch {
				case m.Code != 0:
					err = &CommandError{Code: m.Code, Err: err}
				case m.Layer != "":
					err = &LayerError{Layer: m.Layer, Err: err}
				}
				done <- err
				return
			case m.Ready:
				sb.log.Debug("sandbox init", "step", "command started", "elapsed", m.Elapsed)
				sb.record(Record{Event: "ready", Pid: m.Pid})
				done <- nil
				ready = true
			case m.Layer != "":
				sb.log.Debug("sandbox init", "step", m.Layer, "elapsed", m.Elapsed)
				sb.record(Record{Event: "layer", Layer: m.Layer, State: m.State, Detail: m.Detail})
				if m.State == "degraded" {
					sb.log.Warn("sandbox layer NOT applied (allowed by --allow-degraded)", "layer", m.Layer, "reason", m.Detail)
				} else {
					sb.log.Debug("sandbox layer applied", "layer", m.Layer, "detail", m.Detail)
				}
			}
		}
		if !ready {
			done <- errors.New("sandbox init exited before starting the command (see its stderr)")
		}
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("sandbox init did not start the command within %s", startTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unenforcedError says which limits the group of placer mode cannot
// enforce, naming the group once: "the cgroup cannot enforce memory.max".
func unenforcedError(mode string, missing []string) error {
	group := "the " + mode
	switch mode {
	case "process-group":
		group = "the process group"
	case "systemd-scope":
		group = "the systemd scope's cgroup"
	case "cgroup-v1":
		group = "the cgroup v1 hierarchies"
	}
	return fmt.Errorf("%s cannot enforce %s (controller not available)", group, strings.Join(missing, ", "))
}

// newGroup creates the sandbox's cgroup: with scope, a transient scope (the
// system manager for root, the user's own manager otherwise), created
// after init has started, while it builds the sandbox; else a cgroup v2
// directory below our own, which init is cloned into, or, for root when
// that cannot enforce the limits, cgroup v1 directories, which init is
// moved into before it is released (hostPlacer). A limit the chosen
// cgroup cannot enforce is a failure unless the cgroup layer is degraded.
func (sb *Sandbox) newGroup(ctx context.Context, root, scope bool) error {
	limits := sb.childLimits()
	if !scope {
		// The directories are ours: marked as a live owner's from before
		// the first is made until the last is removed (cleanup), so that
		// no sweep takes them for a killed owner's (SweepLeftovers).
		l, err := cgroup.LockGroup(ctx, cgroup.GroupLockDir(), "soda-sandbox-"+sb.ID)
		if err != nil {
			sb.log.Warn("sandbox cgroup without an owner lock: a sweep judges it by its age", "err", err)
		}
		sb.groupLock = l
	}
	degraded := slices.Contains(sb.spec.AllowDegraded, LayerCgroup)
	fail := func(err error) error {
		if !degraded {
			return &LayerError{Layer: LayerCgroup, Err: err}
		}
		sb.log.Warn("sandbox layer NOT applied (allowed by --allow-degraded): no limits", "layer", LayerCgroup, "reason", err)
		sb.record(Record{Event: "layer", Layer: LayerCgroup, State: "degraded", Detail: err.Error()})
		sb.cgroupDegraded = true
		if scope {
			// init runs already: only a process group can still hold it.
			sb.placer = cgroup.NewProcessGroupPlacer()
		} else {
			// A cgroup v2 directory without controllers still lets the
			// whole sandbox be killed at once.
			sb.placer = cgroup.NewPlacer(sb.log, "soda-sandbox", cgroup.Limits{})
		}
		g, gerr := sb.placer.NewGroup(sb.ID)
		sb.group = g
		return gerr
	}
	if sb.spec.Knobs.unavailable(LayerCgroup) {
		return fail(errors.New("unavailable (test knob)"))
	}
	var placer cgroup.Placer
	if scope {
		r := <-sb.pendingScope
		sb.pendingScope = nil
		if r.err != nil {
			return fail(r.err)
		}
		placer = r.placer
	} else {
		p, err := sb.hostPlacer(root, limits)
		if err != nil {
			return fail(err)
		}
		placer = p
	}
	if missing := placer.Unenforced(); len(missing) > 0 {
		if c, ok := placer.(interface{ Close() error }); ok {
			c.Close()
		}
		return fail(unenforcedError(placer.Mode(), missing))
	}
	g, err := placer.NewGroup(sb.ID)
	if err != nil {
		return fail(err)
	}
	sb.placer, sb.group = placer, g
	sb.record(Record{Event: "layer", Layer: LayerCgroup, State: "applied", Detail: g.String()})
	return nil
}

// leftoverAge is how long a sandbox cgroup must have been empty and
// unchanged before SweepLeftovers removes it; a sibling's directory is
// younger than that between its creation and the clone into it.
const leftoverAge = 10 * time.Second

// scopeResult is a systemd placer being connected.
type scopeResult struct {
	placer cgroup.Placer // the engine's, with the sandbox's limits
	err    error
}

// childLimits are the spec's limits for a placer.
func (sb *Sandbox) childLimits() cgroup.Limits {
	l := sb.spec.Limits
	return cgroup.Limits{MemoryMax: l.MemoryMax, TasksMax: l.TasksMax, CPUQuota: l.CPUPercent, CPUWeight: l.CPUWeight}
}

// idmapGrants prepares idmapped mounts (root only): each granted path not
// owned by the sandbox uid is mapped so that the sandbox uid acts as its
// owner inside.
func (sb *Sandbox) idmapGrants(initPath string, cfg *wire.Config, owners map[string][2]uint32) error {
	if sb.spec.Knobs.unavailable(LayerIDMap) {
		if slices.Contains(sb.spec.AllowDegraded, LayerIDMap) {
			sb.record(Record{Event: "layer", Layer: LayerIDMap, State: "degraded", Detail: "unavailable (test knob)"})
			return nil
		}
		return &LayerError{Layer: LayerIDMap, Err: errors.New("unavailable (test knob)")}
	}
	byOwner := map[[2]uint32]int{}
	cfg.IDMaps = map[string]int{}
	for _, g := range grantList(sb.spec) {
		key := owners[g.path]
		// A read-only grant of a root-owned tree is not idmapped: the
		// sandbox uid would read every root-only file in it. It sees what
		// any user may read there.
		if g.ro && key[0] == 0 {
			continue
		}
		idx, ok := byOwner[key]
		if !ok {
			ns, err := newIDMapNS(initPath, cfg.UID, cfg.GID, key[0], key[1])
			if err != nil {
				return &LayerError{Layer: LayerIDMap, Err: err}
			}
			sb.idmaps = append(sb.idmaps, ns)
			idx = len(sb.idmaps) - 1
			byOwner[key] = idx
		}
		cfg.IDMaps[g.path] = idx
	}
	return nil
}

// grant is one granted path.
type grant struct {
	path string
	ro   bool
}

// grantList lists the spec's grants, read-only ones first.
func grantList(s Spec) []grant {
	var gs []grant
	for _, p := range s.ReadOnly {
		gs = append(gs, grant{p, true})
	}
	for _, p := range s.ReadWrite {
		gs = append(gs, grant{p, false})
	}
	return gs
}

// namespaceError turns a failed clone into the layer that is missing.
func namespaceError(err error, userns bool) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
		if userns {
			return &LayerError{Layer: LayerUserNS, Err: fmt.Errorf("create namespaces: %w (are unprivileged user namespaces enabled? see kernel.unprivileged_userns_clone and user.max_user_namespaces)", err)}
		}
		return &LayerError{Layer: LayerNetNS, Err: fmt.Errorf("create namespaces: %w", err)}
	}
	return fmt.Errorf("start sandbox init: %w", err)
}

// Stop asks the sandbox to end: its command gets SIGTERM, and everything
// left in its cgroup SIGKILL after a grace period. It returns at once;
// Wait (which the caller runs anyway) returns when the sandbox has ended.
// Stopping a sandbox that has ended does nothing.
func (sb *Sandbox) Stop() {
	sb.stopOnce.Do(func() { close(sb.stopCh) })
}

// Signal sends sig to the sandbox's init, which forwards it to the command.
func (sb *Sandbox) Signal(sig syscall.Signal) error {
	if sb.adopted != nil {
		return sb.adopted.signal(sig)
	}
	return sb.cmd.Process.Signal(sig)
}

// Wait waits for the command to end (stopping it at Spec.Timeout or when
// ctx is cancelled: SIGTERM, then SIGKILL to the whole cgroup after a
// grace period), kills whatever is left in the cgroup and frees
// everything. It returns the command's exit status.
func (sb *Sandbox) Wait(ctx context.Context) (ExitStatus, error) {
	sb.waitOnce.Do(func() { sb.exit, sb.waitErr = sb.wait(ctx) })
	return sb.exit, sb.waitErr
}

func (sb *Sandbox) wait(ctx context.Context) (ExitStatus, error) {
	done := make(chan error, 1)
	if sb.adopted != nil {
		go func() { done <- sb.adopted.wait() }()
	} else {
		go func() { done <- sb.cmd.Wait() }()
	}
	var timeout <-chan time.Time
	if sb.spec.Timeout > 0 {
		t := time.NewTimer(sb.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var st ExitStatus
	var werr error
	stopping := false
	var kill <-chan time.Time
	stop := sb.stopCh
loop:
	for {
		select {
		case werr = <-done:
			break loop
		case <-timeout:
			st.TimedOut = true
			sb.log.Warn("sandbox timed out; stopping it", "timeout", sb.spec.Timeout)
			timeout = nil
			stopping = true
			_ = sb.Signal(syscall.SIGTERM)
			kill = time.After(StopGrace)
		case <-ctx.Done():
			if !stopping {
				stopping = true
				_ = sb.Signal(syscall.SIGTERM)
				kill = time.After(StopGrace)
			}
		case <-stop:
			stop = nil
			if !stopping {
				sb.log.Info("sandbox stop requested")
				stopping = true
				_ = sb.Signal(syscall.SIGTERM)
				kill = time.After(StopGrace)
			}
		case <-kill:
			kill = nil
			_ = sb.group.Signal(syscall.SIGKILL)
			_ = sb.Signal(syscall.SIGKILL)
		case <-sb.detachCh:
			if !stopping {
				return ExitStatus{}, sb.detach()
			}
		}
	}
	if sb.adopted != nil {
		st.Code, st.Signal = sb.adopted.status()
		l := sb.adopted.limits
		st.MemoryKills, st.TasksRefused, st.CPUThrottled = l.OOMKills, l.TasksRefused, l.CPUThrottled
		werr = nil
	} else if ps := sb.cmd.ProcessState; ps != nil {
		// Init's last words on the life socket, written before it
		// exited: the cgroup's limit counters.
		if le, ok := readLifeExit(sb.life); ok {
			st.MemoryKills, st.TasksRefused, st.CPUThrottled = le.OOMKills, le.TasksRefused, le.CPUThrottled
		}
		ws := ps.Sys().(syscall.WaitStatus)
		switch {
		case ws.Exited():
			// Init exits with 128+N when the command was killed by signal
			// N, as a shell does; an exit(130) looks the same, so no
			// signal is inferred.
			st.Code = ws.ExitStatus()
		case ws.Signaled():
			st.Code = 128 + int(ws.Signal())
			st.Signal = unix.SignalName(ws.Signal())
		}
		werr = nil
	}
	tExit := time.Now()
	sb.cleanup(context.WithoutCancel(ctx))
	sb.awaitStatus()
	if sb.watch != nil {
		if p := sb.watch.planted(); len(p) > 0 {
			sb.log.Warn("the sandbox made files the host may run, where nothing could protect them (they did not exist when it started): check them before using them", "planted", strings.Join(p, " "))
			sb.record(Record{Event: "planted", Detail: strings.Join(p, " ")})
		}
	}
	sb.log.Debug("sandbox ended", "cleanup", time.Since(tExit), "total", time.Since(sb.started))
	rec := Record{Event: "exit", Exit: &st, DurationMS: float64(time.Since(sb.started).Microseconds()) / 1000}
	sb.record(rec)
	return st, werr
}

// cleanup kills everything left in the sandbox's cgroup and frees the
// cgroup, the egress proxy, the uid and the idmap namespaces.
func (sb *Sandbox) cleanup(ctx context.Context) {
	if sb.pendingScope != nil {
		<-sb.pendingScope // the engine's placer: nothing to close
		sb.pendingScope = nil
	}
	if sb.group != nil {
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := sb.group.Kill(kctx); err != nil {
			sb.log.Warn("kill sandbox processes", "group", sb.group.String(), "err", err)
		}
		cancel()
		if err := sb.group.Release(); err != nil {
			sb.log.Warn("release sandbox cgroup", "group", sb.group.String(), "err", err)
		}
		sb.group = nil
	}
	// What Release could not remove is left to the sweeps' age rule.
	sb.groupLock.Release()
	sb.groupLock = nil
	if c, ok := sb.placer.(interface{ Close() error }); ok {
		c.Close()
	}
	sb.placer = nil
	if sb.cmd != nil && sb.cmd.ProcessState == nil && sb.cmd.Process != nil {
		_ = sb.cmd.Process.Kill()
		_ = sb.cmd.Wait()
	}
	if sb.cancelProxy != nil {
		// Init is gone: the control socket reads end of file once the
		// proxy has taken the connections still queued on it, and those
		// end as their other side died with the sandbox. Give that a
		// moment, so they are served and audited, then cut the rest.
		select {
		case <-sb.proxyDone:
		case <-time.After(proxyDrain):
		}
		sb.cancelProxy()
		sb.egress.Close()
		<-sb.proxyDone
		sb.cancelProxy = nil
	} else if sb.egress != nil {
		sb.egress.Close()
	}
	sb.closeExec()
	sb.closeIDMaps()
	if sb.life != nil {
		sb.life.Close()
		sb.life = nil
	}
	if sb.adopted != nil {
		sb.adopted.close()
	}
	sb.uid.release()
	sb.uid = nil
	if sb.watch != nil {
		// Nothing of the sandbox runs any more: its placeholders go.
		sb.watch.removePlaceholders()
	}
	if sb.home != nil {
		if err := sb.home.Remove(); err != nil {
			sb.log.Warn("remove sandbox home", "home", sb.home.Path(), "err", err)
		}
		sb.home = nil
	}
}

func grantStrings(p egress.Policy) []string {
	var out []string
	for _, g := range p.Allow {
		s := g.String()
		if g.Private {
			s += " (private allowed)"
		}
		out = append(out, s)
	}
	for _, port := range p.MCPPorts {
		out = append(out, fmt.Sprintf("mcp 127.0.0.1:%d", port))
	}
	return out
}
