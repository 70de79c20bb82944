package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/workhome"
)

// Linux is the Linux sandbox engine: namespaces, a private root, Landlock,
// seccomp, a cgroup, and egress through a host-side proxy. One engine
// serves any number of sandboxes at once; Close it when they have ended.
type Linux struct {
	cfg Config
	// initInterp is the ELF interpreter InitPath asks for ("" static),
	// read once: an image's root refuses a dynamic init (imageInitError).
	initInterp string

	// The systemd placer every sandbox of this engine shares, connected
	// on first use (one D-Bus connection per engine, not per sandbox);
	// Close ends it.
	scopeMu sync.Mutex
	scopes  *cgroup.ScopePlacer

	uids *uidPool // the uids of a privileged engine's sandboxes
	// warmer starts the kernel's wait before a cgroup v1 placement at
	// the beginning of each Start (nil: nothing to warm here).
	warmer *cgroup.Warmer

	// The host's own addresses, which every sandbox's proxy refuses like
	// loopback: one netlink subscription per engine, made on first use.
	addrMu sync.Mutex
	addrs  *egress.HostAddrs

	// The homes NewHome made that no sandbox has taken yet.
	homeMu sync.Mutex
	homes  map[string]*workhome.Home
}

// New checks cfg and returns an engine built from it.
func New(cfg Config) (*Linux, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := checkInitPath(cfg.InitPath); err != nil {
		return nil, err
	}
	interp, err := elfInterp(cfg.InitPath)
	if err != nil {
		return nil, fmt.Errorf("sandbox: Config.InitPath: %w", err)
	}
	switch cfg.Cgroups {
	case CgroupSystemd, CgroupDirect:
	case "":
		return nil, errors.New("sandbox engine: Config.Cgroups is not set (systemd or direct; see Detect)")
	default:
		return nil, fmt.Errorf("sandbox engine: unknown Config.Cgroups %q (systemd or direct)", cfg.Cgroups)
	}
	root := os.Geteuid() == 0
	switch {
	case cfg.Privileged && !root:
		return nil, errors.New("sandbox engine: a privileged engine (dedicated uids, no user namespace) needs root")
	case !cfg.Privileged && root:
		return nil, errors.New("sandbox engine: as root the engine must be privileged: a user namespace would map the sandbox to root")
	}
	if cfg.Adoptable && cfg.Cgroups != CgroupSystemd {
		return nil, errors.New("sandbox engine: an adoptable engine needs systemd scopes (Config.Cgroups systemd)")
	}
	if cfg.UIDs == (UIDRange{}) {
		cfg.UIDs = DefaultUIDs
	}
	if cfg.UIDs.First <= 0 || cfg.UIDs.Count <= 0 || cfg.UIDs.First+cfg.UIDs.Count > 1<<31-1 || cfg.UIDs.LockDir == "" {
		return nil, fmt.Errorf("sandbox engine: bad uid range %+v (First > 0, Count > 0, below 2^31, LockDir set)", cfg.UIDs)
	}
	return &Linux{cfg: cfg, initInterp: interp, uids: &uidPool{base: cfg.UIDs.First, count: cfg.UIDs.Count, dir: cfg.UIDs.LockDir},
		warmer: cgroup.NewWarmer()}, nil
}

// hostAddrs returns the engine's watch of the host's addresses, or nil
// (the proxy then reads them per CONNECT) when no subscription can be had.
func (e *Linux) hostAddrs(log *slog.Logger) egress.LocalAddrs {
	e.addrMu.Lock()
	defer e.addrMu.Unlock()
	if e.addrs == nil {
		a, err := egress.WatchHostAddrs(log)
		if err != nil {
			log.Warn("egress: no address subscription; the host's addresses are read per connection", "err", err)
			return nil
		}
		e.addrs = a
	}
	return e.addrs
}

// SweepLeftovers removes what sandboxes whose owner was killed left
// behind, and returns what it removed: with systemd, the scopes of owners
// that are gone (a live owner's, in this process or another, is never
// touched, see cgroup.ScopePlacer.SweepLeftovers); without, the cgroup
// directories the engine made itself, in every hierarchy mounted (the v2
// tree and each v1 one, the memory hierarchy's below any process's own
// cgroup too, in SandboxParent, which itself is never removed: its name
// does not start with soda-sandbox-; see cgroup.SweepGroups: a live
// owner's are never touched,
// those without an owner lock only when empty and older than a sibling's
// between its creation and its clone); and either way the homes of
// killed owners in the engine's state directory (NewHome, and sodactl
// run's). Call it once when a process that starts sandboxes starts.
func (e *Linux) SweepLeftovers(ctx context.Context) ([]string, error) {
	var removed []string
	var errs []error
	if e.cfg.Cgroups == CgroupSystemd {
		p, err := e.scopePlacer(ctx)
		if err == nil {
			var units []string
			units, err = p.SweepLeftovers(ctx)
			removed = append(removed, units...)
		}
		if err != nil {
			errs = append(errs, err)
		}
	} else {
		dirs, err := cgroup.SweepGroups(ctx, e.cfg.Log, "soda-sandbox", cgroup.GroupLockDir(), leftoverAge)
		removed = append(removed, dirs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep sandbox cgroups: %w", err))
		}
	}
	if homes, err := e.homeDir(""); err == nil {
		if n := homes.Sweep(e.cfg.Log); n > 0 {
			removed = append(removed, fmt.Sprintf("%d homes in %s", n, homes.Path()))
		}
	} else {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// homeDir opens dir, or the state directory of the engine's user for ""
// (workhome.StateDir), as a directory of sandbox homes.
func (e *Linux) homeDir(dir string) (*workhome.Dir, error) {
	if dir == "" {
		dir = workhome.StateDir(os.Geteuid(), os.Getenv)
	}
	d, err := workhome.Open(dir, os.Geteuid())
	if err != nil {
		return nil, fmt.Errorf("sandbox homes: %w", err)
	}
	return d, nil
}

// NewHome makes an empty private home (0700) for one sandbox in dir, or
// with dir "" in the state directory of the engine's user
// (workhome.StateDir: /run/soda/sandbox for root), and returns its path,
// to use as Spec.Home. The engine owns it: a lock held for as long as
// this process lives marks it live; the teardown of the first sandbox
// started with it as Spec.Home removes it (Close removes one no sandbox
// took); and when this process is killed first, the SweepLeftovers of
// any later engine of the same user removes it, its lock being free
// (dir "": every soda binary that starts sandboxes sweeps at start). A
// caller may remove it itself too. dir must be a directory of the
// engine's user that nobody else can write (not /tmp).
func (e *Linux) NewHome(dir string) (string, error) {
	d, err := e.homeDir(dir)
	if err != nil {
		return "", err
	}
	h, err := d.New()
	if err != nil {
		return "", err
	}
	e.homeMu.Lock()
	defer e.homeMu.Unlock()
	if e.homes == nil {
		e.homes = map[string]*workhome.Home{}
	}
	e.homes[h.Path()] = h
	return h.Path(), nil
}

// takeHome hands the home at path, if NewHome made it and no sandbox
// took it yet, to the sandbox that uses it (removed at its teardown).
func (e *Linux) takeHome(path string) *workhome.Home {
	e.homeMu.Lock()
	defer e.homeMu.Unlock()
	h := e.homes[path]
	delete(e.homes, path)
	return h
}

// Close releases what the engine holds for all its sandboxes (the
// connection to systemd, the address subscription). Call it once every
// sandbox has ended.
func (e *Linux) Close() error {
	var errs []error
	e.homeMu.Lock()
	for p, h := range e.homes {
		if err := h.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox home %s: %w", p, err))
		}
	}
	e.homes = nil
	e.homeMu.Unlock()
	e.addrMu.Lock()
	if e.addrs != nil {
		errs = append(errs, e.addrs.Close())
		e.addrs = nil
	}
	e.addrMu.Unlock()
	e.scopeMu.Lock()
	defer e.scopeMu.Unlock()
	if e.scopes != nil {
		errs = append(errs, e.scopes.Close())
		e.scopes = nil
	}
	return errors.Join(errs...)
}

// scopePlacer returns the engine's systemd placer, connecting it on first
// use to the service manager that makes the sandboxes' scopes: the
// system's for a privileged engine, the user's own otherwise.
func (e *Linux) scopePlacer(ctx context.Context) (*cgroup.ScopePlacer, error) {
	e.scopeMu.Lock()
	defer e.scopeMu.Unlock()
	if e.scopes != nil {
		return e.scopes, nil
	}
	var p *cgroup.ScopePlacer
	var err error
	if e.cfg.Privileged {
		p, err = cgroup.NewSystemdPlacer(ctx, e.cfg.Log, "soda-sandbox", "soda-sandbox.slice", cgroup.Limits{})
	} else {
		p, err = cgroup.NewUserSystemdPlacer(ctx, e.cfg.Log, "soda-sandbox", "soda-sandbox.slice", cgroup.Limits{})
	}
	if err != nil {
		return nil, err
	}
	// Init is its own gate: it forks nothing before placedByte.
	p.WithoutGate()
	if e.cfg.Adoptable {
		// The sandboxes outlive a crash of their supervisor, for its
		// successor; its stop ends them itself, and a supervisor that
		// never comes back closes their life sockets.
		p.WithoutStopPropagation()
	}
	e.scopes = p
	return p, nil
}
