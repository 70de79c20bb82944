package sandboxinit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"

	"github.com/soda-project/soda/internal/egress/relay"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// runInit is PID 1 of the sandbox. It builds the sandbox (network, root,
// identity), confines itself and forks the command, relays egress,
// forwards signals, reaps orphans, and exits with the command's status;
// its exit ends the PID namespace and so every process left in it.
func runInit() int {
	// The sandbox's skeleton (mount points, /dev, /run) is made with the
	// modes init names, not whatever its starter's umask takes away: under
	// sodad (UMask=0077) the directories leading to a grant were 0700 and
	// the sandbox's uid could not reach the grant. The command gets the
	// starter's umask back (set before it is forked, after confine).
	callerUmask := unix.Umask(0o022)
	fds := wire.ParseFDs(os.Getenv(wire.FDsEnv))
	if len(fds) < 4 {
		fmt.Fprintln(os.Stderr, "soda-sandbox-init: started without its descriptors (this program is started by sodactl or sodad, not by hand)")
		return 125
	}
	r := newInitRun(fds)
	if err := r.readConfig(fds[4:]); err != nil {
		return r.fail("", err)
	}

	// The sandbox, layer by layer, each reported as it is in place.
	if err := r.ownHostnameAndKeyring(); err != nil {
		return r.fail("", err)
	}
	if err := r.setupNetwork(fds[2]); err != nil {
		return r.fail(wire.LayerNetNS, err)
	}
	if layer, err := r.buildRoot(); err != nil {
		return r.fail(layer, err)
	}
	if err := r.limitIPC(); err != nil {
		return r.fail(wire.LayerCgroup, err)
	}
	r.reportIDMap()
	if err := r.prepareCommand(); err != nil {
		return r.failCommand(err)
	}

	// From here a signal from the host is for the command: catch it now
	// (Go's default would end init) and forward it once the command runs.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH, syscall.SIGUSR1, syscall.SIGUSR2)

	// Init confines itself, then forks the command, which inherits it all.
	// Per-thread state (capability sets, the bounding set) is what the
	// forking thread has: this one.
	runtime.LockOSThread()
	if err := r.awaitPlacement(); err != nil {
		return r.fail(wire.LayerCgroup, err)
	}
	if err := r.startRepoGuard(); err != nil {
		return r.fail(wire.LayerMountNS, err)
	}
	if err := r.enterCgroupNS(); err != nil {
		return r.fail(wire.LayerMountNS, err)
	}
	if layer, err := confine(&r.cfg, r.report); err != nil {
		return r.fail(layer, err)
	}
	unix.Umask(callerUmask)
	if err := r.cfg.guard.waitReady(); err != nil {
		return r.fail(wire.LayerMountNS, err)
	}

	// Egress relay: every connection and DNS query goes to the host.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.serveEgress(ctx)

	if r.cfg.Persistent {
		// A live sandbox: commands come from the host (exec_linux.go).
		r.ready(wire.Status{Ready: true})
		return serveExec(&r.cfg, r.execFD, sigs)
	}
	// Threads for init's runtime (reserveThreads), made once its own
	// goroutines run (spares made earlier are theirs by now) and before
	// the command can take every task the limit allows: without them, a
	// fork bomb at its limit made init abort ("failed to create new OS
	// thread") when a signal came, and the run end with status 2 and a
	// Go crash dump.
	reserveThreads(sparesFor(&r.cfg))
	proc, err := r.startCommand()
	if err != nil {
		return r.fail("", err)
	}
	r.ready(wire.Status{Ready: true, Pid: proc.Pid})
	exited, guardDied := reapChildren(proc.Pid, r.cfg.guard)
	return r.supervise(proc.Pid, sigs, exited, guardDied)
}

// initRun is what init holds from its start to its exit: its descriptors,
// the configuration, and what one phase of runInit hands on to the next.
type initRun struct {
	cfg      config
	life     *os.File        // the life socket: init's alone, not the guard's, not the command's
	hostGone <-chan struct{} // closed once the host's end of life is gone (watchLife)
	status   *os.File        // the status pipe to the host
	enc      *json.Encoder   // on status
	start    time.Time       // when init started: each status's Elapsed is since then
	cfgFile  *os.File        // the configuration pipe
	// cfgIn is set once the configuration is read; a failing init waits
	// for the host's placement verdict before it exits, so that the host
	// never places a process that is already gone.
	cfgIn  *bufio.Reader
	userns []*os.File // the idmap user namespaces, until the root is built
	execFD int        // a live sandbox's exec socket, or -1

	relay *relay.Relay   // the egress relay (setupNetwork)
	lns   []net.Listener // its listeners
	dns   net.PacketConn // the DNS sink, or nil

	stdio []*os.File  // the command's 0, 1 and 2
	pty   *sandboxPTY // the command's terminal, if the caller has one
	path  string      // the command's executable (not for a live sandbox)
}

// newInitRun takes init's descriptors (wire.FDsEnv: configuration,
// status, egress control, life, then the user namespaces and a live
// sandbox's exec socket) and starts watching the life socket.
func newInitRun(fds []int) *initRun {
	// The life socket is init's alone: not the repository guard's, not
	// the command's.
	unix.CloseOnExec(fds[3])
	life := os.NewFile(uintptr(fds[3]), "life")
	status := os.NewFile(uintptr(fds[1]), "status")
	return &initRun{
		life:     life,
		hostGone: watchLife(life),
		status:   status,
		enc:      json.NewEncoder(status),
		start:    time.Now(),
		cfgFile:  os.NewFile(uintptr(fds[0]), "config"),
		execFD:   -1,
	}
}

// report sends one status line to the host.
func (r *initRun) report(m wire.Status) {
	m.Elapsed = time.Since(r.start)
	_ = r.enc.Encode(m)
}

// quit reports m and returns code, once the host has said where it placed
// init if the configuration was read.
func (r *initRun) quit(m wire.Status, code int) int {
	r.report(m)
	if r.cfgIn != nil {
		_, _ = r.cfgIn.ReadByte()
	}
	return code
}

// fail reports err as the failure of layer l and returns 125.
func (r *initRun) fail(l wire.Layer, err error) int {
	return r.quit(wire.Status{Layer: l, Error: err.Error()}, 125)
}

// failCommand reports a command that cannot run with its own exit code
// (126, 127: commandError) and any other failure as fail does.
func (r *initRun) failCommand(err error) int {
	var ce *commandError
	if errors.As(err, &ce) {
		return r.quit(wire.Status{Error: ce.Error(), Code: ce.Code}, ce.Code)
	}
	return r.fail("", err)
}

// readConfig reads the host's configuration, one JSON line of this
// protocol version, and sorts the descriptors after the first four
// (nsFDs): the idmap user namespaces, and last a live sandbox's exec
// socket.
func (r *initRun) readConfig(nsFDs []int) error {
	in := bufio.NewReader(r.cfgFile)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read sandbox configuration: %w", err)
	}
	if err := json.Unmarshal(line, &r.cfg.Config); err != nil {
		return fmt.Errorf("read sandbox configuration: %w", err)
	}
	if r.cfg.Version != wire.Version {
		return fmt.Errorf("sandbox configuration of protocol version %d, this %s speaks %d: the host and its init binary come from different builds", r.cfg.Version, wire.InitArg0, wire.Version)
	}
	r.cfgIn = in
	if r.cfg.Persistent && len(nsFDs) > 0 {
		r.execFD, nsFDs = nsFDs[len(nsFDs)-1], nsFDs[:len(nsFDs)-1]
	}
	for _, fd := range nsFDs {
		r.userns = append(r.userns, os.NewFile(uintptr(fd), "userns"))
	}
	return nil
}

// ownHostnameAndKeyring gives the sandbox its own hostname and a session
// keyring of its own: the caller's keys are not possessed.
func (r *initRun) ownHostnameAndKeyring() error {
	_ = unix.Sethostname([]byte("soda-sandbox"))
	if _, err := unix.KeyctlJoinSessionKeyring("soda-sandbox"); err != nil {
		return fmt.Errorf("join a new session keyring: %w", err)
	}
	return nil
}

// setupNetwork brings up the network namespace's loopback and the egress
// relay's listeners on it (egressFD is its control socket to the host),
// and reports the network layer.
func (r *initRun) setupNetwork(egressFD int) error {
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	var detail string
	var err error
	r.relay, r.lns, r.dns, detail, err = setupNetwork(&r.cfg, egressFD)
	if err != nil {
		return err
	}
	r.report(wire.Status{Layer: wire.LayerNetNS, State: "applied", Detail: detail})
	return nil
}

// buildRoot builds the sandbox's root in its mount namespace (rootfs_linux.go)
// and reports the mount and PID namespace layers: what the host would run
// that is protected, the files shown without their secrets. A failure
// names the layer it belongs to (the mount namespace unless buildRoot says
// otherwise).
func (r *initRun) buildRoot() (wire.Layer, error) {
	if err := buildRoot(&r.cfg, r.userns); err != nil {
		var lf *layerFailure
		if errors.As(err, &lf) {
			return lf.layer, lf.err
		}
		return wire.LayerMountNS, err
	}
	for _, f := range r.userns {
		f.Close()
	}
	cfg := &r.cfg
	r.report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "private root: read-only system, host sockets and homes hidden"})
	if len(cfg.protected)+len(cfg.unprotected) > 0 {
		detail := fmt.Sprintf("%d paths the host would run read-only: %s", len(cfg.protected), strings.Join(cfg.protected, ", "))
		if len(cfg.unprotected) > 0 {
			detail += "; unprotected by the caller: " + strings.Join(cfg.unprotected, ", ")
		}
		r.report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: detail})
	}
	if len(cfg.masked) > 0 {
		r.report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "shown without their secrets: " + strings.Join(cfg.masked, ", ")})
	}
	r.report(wire.Status{Layer: wire.LayerPIDNS, State: "applied", Detail: "fresh /proc"})
	return "", nil
}

// limitIPC sets the IPC namespace's limits, which are the sandbox's
// limits as its cgroup's are (and waived with them): a failure is
// reported degraded when the cgroup layer may be, else returned.
func (r *initRun) limitIPC() error {
	detail, err := limitIPC(&r.cfg)
	switch {
	case err != nil && degraded(&r.cfg, wire.LayerCgroup):
		r.report(wire.Status{Layer: wire.LayerCgroup, State: "degraded", Detail: err.Error()})
	case err != nil:
		return err
	default:
		r.report(wire.Status{Layer: wire.LayerCgroup, State: "applied", Detail: detail})
	}
	return nil
}

// reportIDMap reports the idmap layer as buildRoot left it: the granted
// paths idmapped, those read-only without idmap, or why it is degraded.
func (r *initRun) reportIDMap() {
	cfg := &r.cfg
	if len(cfg.idmapDegraded) > 0 {
		r.report(wire.Status{Layer: wire.LayerIDMap, State: "degraded", Detail: strings.Join(cfg.idmapDegraded, "; ")})
	} else if len(cfg.IDMaps) > 0 {
		detail := fmt.Sprintf("%d granted paths idmapped to uid %d", len(cfg.IDMaps)-len(cfg.idmapSkipped), cfg.UID)
		if len(cfg.idmapSkipped) > 0 {
			detail += "; read-only without idmap (filesystem cannot): " + strings.Join(cfg.idmapSkipped, ", ")
		}
		r.report(wire.Status{Layer: wire.LayerIDMap, State: "applied", Detail: detail})
	}
}

// prepareCommand opens the command's terminal when the caller has one
// and finds its executable (a live sandbox has no command of its own); a
// command that cannot run is a commandError.
func (r *initRun) prepareCommand() error {
	r.stdio = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if r.cfg.StdinIsTTY {
		var err error
		if r.pty, err = openSandboxPTY(r.cfg.UID, r.cfg.GID); err != nil {
			return err
		}
		// The pty replaces the caller's terminal, never a pipe or file.
		r.stdio[0] = r.pty.slave
		for fd := 1; fd <= 2; fd++ {
			if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
				r.stdio[fd] = r.pty.slave
			}
		}
	}
	if r.cfg.Persistent {
		return nil
	}
	var err error
	r.path, err = lookPath(r.cfg.Argv[0], r.cfg.Env)
	return err
}

// awaitPlacement waits for the host to place init in the sandbox's
// cgroup: init forks nothing before.
func (r *initRun) awaitPlacement() error {
	if b, err := r.cfgIn.ReadByte(); err != nil || b != wire.PlacedByte {
		return errors.New("host did not confirm the cgroup placement")
	}
	return nil
}

// startRepoGuard starts the repository guard (repoguard_linux.go), in the
// cgroup, before init confines itself.
func (r *initRun) startRepoGuard() error {
	var err error
	r.cfg.guard, err = startRepoGuard(&r.cfg, r.status)
	return err
}

// enterCgroupNS makes this thread (the command's parent) enter a cgroup
// namespace rooted at the sandbox's cgroup, and mounts the cgroup
// hierarchies there: the command sees "/" as its cgroup, not the host's
// path, and /sys/fs/cgroup shows nothing above the sandbox.
func (r *initRun) enterCgroupNS() error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare the cgroup namespace: %w", err)
	}
	detail, err := mountCgroupFS(r.cfg.cgroupLayout)
	if err != nil {
		// Not a confinement layer (read-only either way): the command
		// runs with an empty /sys/fs/cgroup and the reason is logged.
		detail += ": " + err.Error()
	}
	r.report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "own cgroup namespace; " + detail})
	return nil
}

// serveEgress relays every connection and DNS query of the sandbox to
// the host until ctx ends.
func (r *initRun) serveEgress(ctx context.Context) {
	go func() { _ = r.relay.Serve(ctx, r.lns) }()
	if r.dns != nil {
		go func() { _ = r.relay.ServeDNS(ctx, r.dns) }()
	}
}

// startCommand forks the command, confined as this thread is, in a
// session of its own (with the pty as its terminal, if any).
func (r *initRun) startCommand() (*os.Process, error) {
	proc, err := os.StartProcess(r.path, r.cfg.Argv, &os.ProcAttr{
		Dir:   r.cfg.Dir,
		Env:   r.cfg.Env,
		Files: r.stdio,
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: r.cfg.StdinIsTTY, Ctty: 0, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", r.path, err)
	}
	return proc, nil
}

// ready tells the host the sandbox is ready (m) and closes the status and
// configuration pipes: init reports nothing more on them.
func (r *initRun) ready(m wire.Status) {
	r.report(m)
	r.status.Close()
	r.cfgFile.Close()
}

// reapChildren reaps every child of init (on another thread: wait4 sees
// the children of every thread). exited gets the command's status, or is
// closed if waiting fails; guardDied is closed when the repository guard
// dies.
func reapChildren(pid int, guard *repoGuard) (exited <-chan syscall.WaitStatus, guardDied <-chan struct{}) {
	ex := make(chan syscall.WaitStatus, 1)
	gd := make(chan struct{})
	go func() {
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				close(ex)
				return
			}
			if p == pid {
				ex <- ws
				return
			}
			if guard.died(p) {
				close(gd)
			}
		}
	}()
	return ex, gd
}

// supervise runs until the command (pid) ends and returns its status as
// init's. It forwards the host's signals (caught from before the command
// started) to the command's process group, from this thread: Landlock's
// signal scope lets a thread signal only processes in its own domain, and
// each of init's threads has a domain of its own (landlock_restrict_self
// is per thread); the command inherited this thread's. The command is
// killed when the repository guard dies or the host is gone.
func (r *initRun) supervise(pid int, sigs <-chan os.Signal, exited <-chan syscall.WaitStatus, guardDied <-chan struct{}) int {
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGWINCH && r.pty != nil {
				r.pty.resize()
			}
			// The command leads its own session, so it is in this group
			// (a session leader cannot leave it): one delivery each.
			_ = syscall.Kill(-pid, s.(syscall.Signal))
		case <-guardDied:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return sendExit(r.life, 125)
		case <-r.hostGone:
			// Nobody holds the sandbox's egress any more: end it (the
			// kernel kills the rest of the PID namespace with init).
			fmt.Fprintln(os.Stderr, "soda-sandbox-init: the supervisor is gone; ending the sandbox")
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return 125
		case ws, ok := <-exited:
			if !ok {
				return 125
			}
			r.cfg.guard.drain()
			// Exit with the command's status: the end of PID 1 ends the
			// PID namespace, and the kernel kills whatever the command left.
			if r.pty != nil {
				r.pty.drain()
			}
			if ws.Signaled() {
				return sendExit(r.life, 128+int(ws.Signal()))
			}
			return sendExit(r.life, ws.ExitStatus())
		}
	}
}

// watchLife returns a channel closed once the host's end of the life
// socket is closed everywhere (wire.LifeExit): the host never writes on
// it, so any return of the read means that.
func watchLife(life *os.File) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var b [64]byte
		for {
			n, err := life.Read(b[:])
			if err != nil || n == 0 {
				return
			}
		}
	}()
	return gone
}

// sendExit tells the host init's exit status on the life socket and
// returns it.
func sendExit(life *os.File, code int) int {
	m := wire.LifeExit{Code: code}
	m.OOMKills, m.TasksRefused, m.CPUThrottled = limitCounters()
	if msg, err := json.Marshal(m); err == nil {
		_, _ = life.Write(msg)
	}
	return code
}

// becomeSandboxUser switches every thread of the process to the sandbox's
// uid and gid with no supplementary groups (root callers; in a user
// namespace the process already has them). For root this empties the
// capability sets. A credential change clears the parent-death signal, so
// it is set again: the host must still take the sandbox down with it
// (unless the sandbox is adoptable: then the life socket alone does).
func becomeSandboxUser(cfg *config) error {
	if !cfg.UserNS {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setresgid(cfg.GID, cfg.GID, cfg.GID); err != nil {
			return fmt.Errorf("setresgid %d: %w", cfg.GID, err)
		}
		if err := syscall.Setresuid(cfg.UID, cfg.UID, cfg.UID); err != nil {
			return fmt.Errorf("setresuid %d: %w", cfg.UID, err)
		}
	}
	if !cfg.Adoptable {
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	}
	return nil
}

// loopbackUp sets IFF_UP on lo, the namespace's only interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// dropBoundingSet empties the capability bounding set of the calling
// thread, the one that forks the command: nothing the command execs can
// gain a capability (file capabilities, setuid root). Init's other threads
// never exec, so their bounding sets do not matter (and one psx round per
// capability would cost milliseconds).
func dropBoundingSet() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// dropCapabilities empties the ambient, permitted, effective and
// inheritable capability sets of every thread of init (capability sets
// are per thread; psx runs the syscall on each), so that none keeps what
// it needed to build the sandbox.
func dropCapabilities() error {
	if _, _, errno := psx.Syscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("clear ambient capabilities: %w", errno)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, errno := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}

func degraded(cfg *config, l wire.Layer) bool { return slices.Contains(cfg.Degraded, l) }

func unavailable(cfg *config, l wire.Layer) bool { return slices.Contains(cfg.Unavailable, l) }

// limitCounters reads the sandbox cgroup's limit counters in init's view of
// /sys/fs/cgroup (mounted rooted at the sandbox's cgroup, mountCgroups):
// the unified hierarchy's memory.events, pids.events and cpu.stat, or the
// v1 controllers' (a hybrid host's). A file the host lacks reads 0. The
// tasks count is 1, not 0, where the cgroup's tasks peaked at its limit
// (pids.peak within cgroup.TasksPeakSlack, which guardSlack is, of
// pids.max): RLIMIT_NPROC refused the forks there, uncounted (nprocLimit).
func limitCounters() (oom, tasks, throttled uint64) {
	first := func(key string, paths ...string) uint64 {
		for _, p := range paths {
			if v, ok := readCounter(p, key); ok {
				return v
			}
		}
		return 0
	}
	const c = "/sys/fs/cgroup/"
	oom = first("oom_kill", c+"memory.events", c+"unified/memory.events", c+"memory/memory.oom_control")
	tasks = first("max", c+"pids.events", c+"unified/pids.events", c+"pids/pids.events")
	if tasks == 0 {
		for _, d := range []string{c, c + "unified/", c + "pids/"} {
			peak, ok1 := readValue(d + "pids.peak")
			limit, ok2 := readValue(d + "pids.max")
			if ok1 && ok2 && peak > 0 && peak+guardSlack >= limit {
				tasks = 1
				break
			}
		}
	}
	throttled = first("nr_throttled", c+"cpu.stat", c+"unified/cpu.stat", c+"cpu/cpu.stat", c+"cpu,cpuacct/cpu.stat")
	return oom, tasks, throttled
}

// readValue reads a cgroup file holding one number ("max" is not one).
func readValue(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// readCounter reads "key N" from a flat-keyed cgroup file.
func readCounter(path, key string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
