package sandboxinit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// The life socket is init's alone: not the repository guard's, not
	// the command's.
	unix.CloseOnExec(fds[3])
	life := os.NewFile(uintptr(fds[3]), "life")
	hostGone := watchLife(life)
	status := os.NewFile(uintptr(fds[1]), "status")
	enc := json.NewEncoder(status)
	start := time.Now()
	report := func(m wire.Status) {
		m.Elapsed = time.Since(start)
		_ = enc.Encode(m)
	}
	// cfgIn is set once the configuration is read; a failing init waits
	// for the host's placement verdict before it exits, so that the host
	// never places a process that is already gone.
	var cfgIn *bufio.Reader
	quit := func(m wire.Status, code int) int {
		report(m)
		if cfgIn != nil {
			_, _ = cfgIn.ReadByte()
		}
		return code
	}
	fail := func(l wire.Layer, err error) int { return quit(wire.Status{Layer: l, Error: err.Error()}, 125) }
	var cfg config
	cfgFile := os.NewFile(uintptr(fds[0]), "config")
	in := bufio.NewReader(cfgFile)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fail("", fmt.Errorf("read sandbox configuration: %w", err))
	}
	if err := json.Unmarshal(line, &cfg.Config); err != nil {
		return fail("", fmt.Errorf("read sandbox configuration: %w", err))
	}
	if cfg.Version != wire.Version {
		return fail("", fmt.Errorf("sandbox configuration of protocol version %d, this %s speaks %d: the host and its init binary come from different builds", cfg.Version, wire.InitArg0, wire.Version))
	}
	cfgIn = in
	var userns []*os.File
	nsFDs := fds[4:]
	execFD := -1
	if cfg.Persistent && len(nsFDs) > 0 {
		execFD, nsFDs = nsFDs[len(nsFDs)-1], nsFDs[:len(nsFDs)-1]
	}
	for _, fd := range nsFDs {
		userns = append(userns, os.NewFile(uintptr(fd), "userns"))
	}

	_ = unix.Sethostname([]byte("soda-sandbox"))
	// A session keyring of its own: the caller's keys are not possessed.
	if _, err := unix.KeyctlJoinSessionKeyring("soda-sandbox"); err != nil {
		return fail("", fmt.Errorf("join a new session keyring: %w", err))
	}
	if err := loopbackUp(); err != nil {
		return fail(wire.LayerNetNS, fmt.Errorf("bring up loopback: %w", err))
	}
	relay, lns, dns, netDetail, err := setupNetwork(&cfg, fds[2])
	if err != nil {
		return fail(wire.LayerNetNS, err)
	}
	report(wire.Status{Layer: wire.LayerNetNS, State: "applied", Detail: netDetail})

	if err := buildRoot(&cfg, userns); err != nil {
		var lf *layerFailure
		if errors.As(err, &lf) {
			return fail(lf.layer, lf.err)
		}
		return fail(wire.LayerMountNS, err)
	}
	for _, f := range userns {
		f.Close()
	}
	report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "private root: read-only system, host sockets and homes hidden"})
	if len(cfg.protected)+len(cfg.unprotected) > 0 {
		detail := fmt.Sprintf("%d paths the host would run read-only: %s", len(cfg.protected), strings.Join(cfg.protected, ", "))
		if len(cfg.unprotected) > 0 {
			detail += "; unprotected by the caller: " + strings.Join(cfg.unprotected, ", ")
		}
		report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: detail})
	}
	if len(cfg.masked) > 0 {
		report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "shown without their secrets: " + strings.Join(cfg.masked, ", ")})
	}
	report(wire.Status{Layer: wire.LayerPIDNS, State: "applied", Detail: "fresh /proc"})
	// The IPC namespace's limits are the sandbox's limits, as its cgroup's
	// are (and waived with them).
	ipcDetail, err := limitIPC(&cfg)
	switch {
	case err != nil && degraded(&cfg, wire.LayerCgroup):
		report(wire.Status{Layer: wire.LayerCgroup, State: "degraded", Detail: err.Error()})
	case err != nil:
		return fail(wire.LayerCgroup, err)
	default:
		report(wire.Status{Layer: wire.LayerCgroup, State: "applied", Detail: ipcDetail})
	}
	if len(cfg.idmapDegraded) > 0 {
		report(wire.Status{Layer: wire.LayerIDMap, State: "degraded", Detail: strings.Join(cfg.idmapDegraded, "; ")})
	} else if len(cfg.IDMaps) > 0 {
		detail := fmt.Sprintf("%d granted paths idmapped to uid %d", len(cfg.IDMaps)-len(cfg.idmapSkipped), cfg.UID)
		if len(cfg.idmapSkipped) > 0 {
			detail += "; read-only without idmap (filesystem cannot): " + strings.Join(cfg.idmapSkipped, ", ")
		}
		report(wire.Status{Layer: wire.LayerIDMap, State: "applied", Detail: detail})
	}

	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	var pty *sandboxPTY
	if cfg.StdinIsTTY {
		if pty, err = openSandboxPTY(cfg.UID, cfg.GID); err != nil {
			return fail("", err)
		}
		// The pty replaces the caller's terminal, never a pipe or file.
		stdio[0] = pty.slave
		for fd := 1; fd <= 2; fd++ {
			if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
				stdio[fd] = pty.slave
			}
		}
	}
	path, err := "", error(nil)
	if !cfg.Persistent {
		path, err = lookPath(cfg.Argv[0], cfg.Env)
	}
	if err != nil {
		var ce *commandError
		if errors.As(err, &ce) {
			return quit(wire.Status{Error: ce.Error(), Code: ce.Code}, ce.Code)
		}
		return fail("", err)
	}

	// From here a signal from the host is for the command: catch it now
	// (Go's default would end init) and forward it once the command runs.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH, syscall.SIGUSR1, syscall.SIGUSR2)

	// Init confines itself, then forks the command, which inherits it all.
	// Per-thread state (capability sets, the bounding set) is what the
	// forking thread has: this one.
	runtime.LockOSThread()

	// Fork only once the host has placed us in the cgroup. Then this
	// thread (the command's parent) enters a cgroup namespace rooted
	// there: the command sees "/" as its cgroup, not the host's path, and
	// the cgroup hierarchies mounted now show nothing above the sandbox.
	if b, err := cfgIn.ReadByte(); err != nil || b != wire.PlacedByte {
		return fail(wire.LayerCgroup, errors.New("host did not confirm the cgroup placement"))
	}
	// The repository guard, in the cgroup, before init confines itself.
	if cfg.guard, err = startRepoGuard(&cfg, status); err != nil {
		return fail(wire.LayerMountNS, err)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fail(wire.LayerMountNS, fmt.Errorf("unshare the cgroup namespace: %w", err))
	}
	cgDetail, err := mountCgroupFS(cfg.cgroupLayout)
	if err != nil {
		// Not a confinement layer (read-only either way): the command
		// runs with an empty /sys/fs/cgroup and the reason is logged.
		cgDetail += ": " + err.Error()
	}
	report(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: "own cgroup namespace; " + cgDetail})

	if layer, err := confine(&cfg, report); err != nil {
		return fail(layer, err)
	}
	unix.Umask(callerUmask)
	if err := cfg.guard.waitReady(); err != nil {
		return fail(wire.LayerMountNS, err)
	}

	// Egress relay: every connection and DNS query goes to the host.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = relay.Serve(ctx, lns) }()
	if dns != nil {
		go func() { _ = relay.ServeDNS(ctx, dns) }()
	}

	if cfg.Persistent {
		// A live sandbox: commands come from the host (exec_linux.go).
		report(wire.Status{Ready: true})
		status.Close()
		cfgFile.Close()
		return serveExec(&cfg, execFD, sigs)
	}
	proc, err := os.StartProcess(path, cfg.Argv, &os.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: stdio,
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: cfg.StdinIsTTY, Ctty: 0, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail("", fmt.Errorf("start %s: %w", path, err))
	}
	report(wire.Status{Ready: true, Pid: proc.Pid})
	status.Close()
	cfgFile.Close()

	// Reap everything (on another thread: wait4 sees the children of every
	// thread); the command's status is ours.
	exited := make(chan syscall.WaitStatus, 1)
	guardDied := make(chan struct{})
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				close(exited)
				return
			}
			if pid == proc.Pid {
				exited <- ws
				return
			}
			if cfg.guard.died(pid) {
				close(guardDied)
			}
		}
	}()

	// Forward the host's signals (caught from before the command started)
	// to the command's process group, from this thread: Landlock's signal
	// scope lets a thread signal only processes in its own domain, and each
	// of init's threads has a domain of its own (landlock_restrict_self
	// is per thread); the command inherited this thread's.
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGWINCH && pty != nil {
				pty.resize()
			}
			// The command leads its own session, so it is in this group
			// (a session leader cannot leave it): one delivery each.
			_ = syscall.Kill(-proc.Pid, s.(syscall.Signal))
		case <-guardDied:
			_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
			return sendExit(life, 125)
		case <-hostGone:
			// Nobody holds the sandbox's egress any more: end it (the
			// kernel kills the rest of the PID namespace with init).
			fmt.Fprintln(os.Stderr, "soda-sandbox-init: the supervisor is gone; ending the sandbox")
			_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
			return 125
		case ws, ok := <-exited:
			if !ok {
				return 125
			}
			cfg.guard.drain()
			// Exit with the command's status: the end of PID 1 ends the
			// PID namespace, and the kernel kills whatever the command left.
			if pty != nil {
				pty.drain()
			}
			if ws.Signaled() {
				return sendExit(life, 128+int(ws.Signal()))
			}
			return sendExit(life, ws.ExitStatus())
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
