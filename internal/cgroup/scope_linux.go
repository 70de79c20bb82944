package cgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/coreos/go-systemd/v22/unit"
	"github.com/godbus/dbus/v5"
)

// DefaultSlice is the slice that holds the children's scopes unless
// configured otherwise. systemd creates it on first use if no unit file
// defines it.
const DefaultSlice = "soda-mcp.slice"

// Timeouts of the systemd placer's D-Bus calls.
const (
	// scopeStartTimeout bounds StartTransientUnit and its job.
	scopeStartTimeout = 30 * time.Second
	// scopeStopTimeout bounds StopUnit and its job on release.
	scopeStopTimeout = 5 * time.Second
	// scopeStopUSec is the scope's TimeoutStopUSec: how long systemd waits
	// after SIGTERM before SIGKILL when it stops the scope itself (at
	// shutdown, or stop propagated from the bridge's service).
	scopeStopUSec = uint64(5 * time.Second / time.Microsecond)
)

// ScopePlacer puts each child in its own transient systemd scope, created
// over D-Bus under a slice, with the configured limits as unit properties.
// The child starts as a gate (see IsGate) and runs the real command only
// once it is inside its scope. All children share one D-Bus connection;
// Close closes it.
type ScopePlacer struct {
	log    *slog.Logger
	prefix string
	slice  string
	limits Limits
	// bindTo is the bridge's own service unit, if it runs in one: its stop
	// propagates to the scopes so that a crashed bridge leaves nothing.
	bindTo string
	fs     cgroupFS
	dial   func(context.Context) (*sdbus.Conn, error)
	noGate bool
	// lockDir holds the lock files that mark live owners (see
	// scopelock_linux.go); "" disables them, and with them SweepLeftovers.
	lockDir  string
	lockWarn sync.Once

	mu   sync.Mutex
	conn *sdbus.Conn
}

// NewSystemdPlacer connects to systemd (the system bus, or systemd's
// private socket when the bus is down and we are root) and returns a placer
// that creates one transient scope per child, named "<prefix>-<id>.scope",
// in slice (DefaultSlice if empty). It returns an error if systemd is not
// PID 1 of this PID namespace or cannot be reached; the caller then falls
// back to NewPlacer. It logs one line naming the mode and the limits.
//
// The program must call RunGate when IsGate reports true (first thing in
// main): every child starts as a re-executed /proc/self/exe.
func NewSystemdPlacer(ctx context.Context, log *slog.Logger, prefix, slice string, limits Limits) (*ScopePlacer, error) {
	return newSystemdPlacer(ctx, log, prefix, slice, limits, sdbus.NewWithContext, false)
}

// NewUserSystemdPlacer is NewSystemdPlacer for the calling user's own
// service manager (systemd --user, reached over the session bus), where an
// unprivileged user may create transient scopes under their own slices.
func NewUserSystemdPlacer(ctx context.Context, log *slog.Logger, prefix, slice string, limits Limits) (*ScopePlacer, error) {
	return newSystemdPlacer(ctx, log, prefix, slice, limits, sdbus.NewUserConnectionContext, true)
}

func newSystemdPlacer(ctx context.Context, log *slog.Logger, prefix, slice string, limits Limits, dial func(context.Context) (*sdbus.Conn, error), user bool) (*ScopePlacer, error) {
	if slice == "" {
		slice = DefaultSlice
	}
	if err := checkUnitName(slice, ".slice"); err != nil {
		return nil, fmt.Errorf("systemd placer: slice: %w", err)
	}
	if prefix == "" {
		return nil, errors.New("systemd placer: empty unit name prefix")
	}
	// A 32-character id leaves room; the name check in NewGroup is exact.
	if n := len(escapeUnitPart(prefix)) + 1 + 32 + len(".scope"); n > unitNameMax {
		return nil, fmt.Errorf("systemd placer: unit name prefix %q is too long", prefix)
	}
	if err := CheckSystemdPID1(); err != nil {
		return nil, fmt.Errorf("systemd placer: %w", err)
	}
	// godbus closes a connection when its context ends; the connection
	// must outlive ctx (it is needed to release children during shutdown).
	conn, err := dial(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("systemd placer: connect to systemd over D-Bus: %w", err)
	}
	// The version is only logged: skip the round trip when nobody reads it.
	version := "?"
	if log.Enabled(ctx, slog.LevelInfo) {
		v, err := conn.GetManagerProperty("Version")
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("systemd placer: ask systemd for its version: %w", err)
		}
		version = v
	}
	if os.Geteuid() != 0 && !user {
		if err := probeManageUnits(ctx, conn, prefix); err != nil {
			conn.Close()
			return nil, fmt.Errorf("systemd placer: %w", err)
		}
	}
	fs, err := ownCgroupFS()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("systemd placer: %w", err)
	}
	p := &ScopePlacer{log: log, prefix: prefix, slice: slice, limits: limits, fs: fs, conn: conn, dial: dial, lockDir: defaultLockDir(user)}
	if own, err := conn.GetUnitNameByPID(ctx, uint32(os.Getpid())); err == nil && strings.HasSuffix(own, ".service") {
		p.bindTo = own
	}
	// Nothing is swept here: other processes of the same service may run
	// scopes of this prefix right now. The caller sweeps, explicitly
	// (SweepLeftovers), and that stops only scopes whose owner is gone.

	attrs := []any{"mode", p.Mode(), "slice", slice, "systemd", strings.Trim(version, `"`)}
	attrs = append(attrs, limits.attrs()...)
	if p.bindTo != "" {
		attrs = append(attrs, "stop_propagated_from", p.bindTo)
	}
	if missing := fs.unenforced(limits); len(missing) > 0 {
		attrs = append(attrs, "unenforced_limits", strings.Join(missing, ","))
	}
	log.Info("child isolation: one transient systemd scope per child, entered before exec, killed as a whole", attrs...)
	return p, nil
}

// WithoutGate makes the placer start children as they are, without the
// gate, for a caller whose child blocks by itself (forks and execs
// nothing) until Started has returned. The child is placed as soon as it
// has a pid instead of once its gate is up.
func (p *ScopePlacer) WithoutGate() { p.noGate = true }

// WithoutStopPropagation makes scopes made from now on independent of
// the service this process runs in: neither its stop nor its failure
// stops them. For an owner that hands its children to its successor
// (adopt_linux.go), whose children must outlive a crash.
func (p *ScopePlacer) WithoutStopPropagation() { p.bindTo = "" }

// WithLockDir sets the directory of the lock files by which live owners
// mark their scopes (default: /run/soda/scopes as root, else under
// $XDG_RUNTIME_DIR/soda), for a caller that may write elsewhere only (a
// service with ProtectSystem=strict: its RuntimeDirectory=). Call it
// before the first child starts; "" disables the locks and sweeping.
func (p *ScopePlacer) WithLockDir(dir string) { p.lockDir = dir }

// WithLimits returns a placer that makes its groups with limits instead
// of the placer's own, sharing p's connection: one long-lived placer
// serves children that each have their own limits. It has no Close; p's
// ends it.
func (p *ScopePlacer) WithLimits(l Limits) Placer { return scopeLimited{p: p, limits: l} }

// scopeLimited is a ScopePlacer with other limits (WithLimits).
type scopeLimited struct {
	p      *ScopePlacer
	limits Limits
}

func (s scopeLimited) NewGroup(id string) (Group, error) { return s.p.newGroup(id, s.limits) }
func (s scopeLimited) Mode() string                      { return s.p.Mode() }
func (s scopeLimited) Unenforced() []string              { return s.p.fs.unenforced(s.limits) }

// Unenforced lists configured limits whose controller is not mounted.
func (p *ScopePlacer) Unenforced() []string { return p.fs.unenforced(p.limits) }

// Mode returns "systemd-scope".
func (p *ScopePlacer) Mode() string { return "systemd-scope" }

// Slice returns the slice that holds the scopes.
func (p *ScopePlacer) Slice() string { return p.slice }

// UnitName returns the scope unit name for the child id.
func (p *ScopePlacer) UnitName(id string) string {
	return escapeUnitPart(p.prefix) + "-" + escapeUnitPart(id) + ".scope"
}

// NewGroup returns the group for child id; the scope itself is created
// when the child has started (as a gate) and has a pid.
func (p *ScopePlacer) NewGroup(id string) (Group, error) { return p.newGroup(id, p.limits) }

func (p *ScopePlacer) newGroup(id string, limits Limits) (Group, error) {
	name := p.UnitName(id)
	if err := checkUnitName(name, ".scope"); err != nil {
		return nil, fmt.Errorf("scope for child %q: %w", id, err)
	}
	return &scopeGroup{p: p, id: id, unit: name, limits: limits}, nil
}

// Close closes the D-Bus connection. Groups must be released before.
func (p *ScopePlacer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	return nil
}

// connection returns the shared connection, reconnecting if it was lost
// (for example when the bus daemon restarted).
func (p *ScopePlacer) connection(ctx context.Context) (*sdbus.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn.Connected() {
		return p.conn, nil
	}
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	conn, err := p.dial(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("reconnect to systemd over D-Bus: %w", err)
	}
	p.log.Info("reconnected to systemd over D-Bus")
	p.conn = conn
	return conn, nil
}

// probeManageUnits checks that we may create transient units: root may,
// other users only if polkit grants org.freedesktop.systemd1.manage-units.
// systemd checks authorization before it parses the properties, so a
// request with a malformed property fails with an argument error when we
// are allowed and with an authorization error when we are not; either way
// no unit is created.
func probeManageUnits(ctx context.Context, conn *sdbus.Conn, prefix string) error {
	name := escapeUnitPart(prefix) + "-probe.scope"
	bad := []sdbus.Property{{Name: "Slice", Value: dbus.MakeVariant(uint32(0))}}
	_, err := conn.StartTransientUnitContext(ctx, name, "fail", bad, nil)
	var derr dbus.Error
	switch {
	case err == nil:
		// Not expected; do not leave it behind.
		_, _ = conn.StopUnitContext(ctx, name, "replace", nil)
		return nil
	case errors.As(err, &derr) && (derr.Name == "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" || derr.Name == "org.freedesktop.DBus.Error.AccessDenied"):
		return fmt.Errorf("uid %d may not create transient units (%s): run as root or grant org.freedesktop.systemd1.manage-units through polkit", os.Geteuid(), derr.Name)
	default:
		return nil
	}
}

// SweepLeftovers stops the scopes of this placer's prefix whose owner is
// gone: the ones whose lock file (see WithLockDir) no live process holds,
// left by a process killed before it could stop them (systemd does not
// propagate a restart of a service to its scopes, and a process that runs
// in no service leaves them running). A live owner's scope, in this
// process or any other (a sibling in the same service among them), is
// never touched, nor is a scope without a lock file. It returns the units
// it stopped. Call it once, when convenient (at start-up); never needed
// for correctness of new children.
func (p *ScopePlacer) SweepLeftovers(ctx context.Context) ([]string, error) {
	if p.lockDir == "" {
		return nil, nil
	}
	conn, err := p.connection(ctx)
	if err != nil {
		return nil, err
	}
	pattern := globEscape(escapeUnitPart(p.prefix)) + "-*.scope"
	units, err := conn.ListUnitsByPatternsContext(ctx, nil, []string{pattern})
	if err != nil {
		return nil, fmt.Errorf("list units %s: %w", pattern, err)
	}
	// Lock files without a listed unit too: an owner killed while its
	// unit was being made leaves the file, and perhaps the unit.
	names, err := lockedUnits(p.lockDir, escapeUnitPart(p.prefix)+"-")
	if err != nil {
		return nil, err
	}
	for _, u := range units {
		if !slices.Contains(names, u.Name) {
			names = append(names, u.Name)
		}
	}
	var stopped []string
	var errs []error
	for _, name := range names {
		l, err := tryLock(filepath.Join(p.lockDir, name+lockSuffix), false)
		switch {
		case errors.Is(err, errLockHeld), errors.Is(err, os.ErrNotExist):
			continue // a live owner's, or no owner we can judge
		case err != nil:
			errs = append(errs, err)
			continue
		}
		loaded := slices.ContainsFunc(units, func(u sdbus.UnitStatus) bool { return u.Name == name })
		if err := p.StopUnit(ctx, name); err != nil {
			l.release(false)
			errs = append(errs, err)
			continue
		}
		l.release(true)
		if loaded {
			stopped = append(stopped, name)
		}
	}
	return stopped, errors.Join(errs...)
}

// StopUnit stops unit and resets its failed state; a unit that is gone
// is fine.
func (p *ScopePlacer) StopUnit(ctx context.Context, name string) error {
	conn, err := p.connection(ctx)
	if err != nil {
		return err
	}
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, name, "replace", done); err != nil {
		if isNoSuchUnit(err) {
			return nil
		}
		return fmt.Errorf("stop %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("stop %s: job %s", name, res)
		}
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", name, ctx.Err())
	}
	if err := conn.ResetFailedUnitContext(ctx, name); err != nil && !isNoSuchUnit(err) {
		return fmt.Errorf("reset failed state of %s: %w", name, err)
	}
	return nil
}

// globEscape quotes the fnmatch metacharacters of a unit name.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(s)
}

// scopeProperties are the properties of a child's transient scope.
func scopeProperties(description, slice string, pid int, bindTo string, l Limits) []sdbus.Property {
	props := []sdbus.Property{
		sdbus.PropDescription(description),
		sdbus.PropSlice(slice),
		sdbus.PropPids(uint32(pid)),
		// A scope that failed (OOM, killed) must not linger, and a unit
		// that is gone cannot collide with a later name.
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
		// systemd stops a scope (shutdown, propagated stop) with SIGTERM,
		// then SIGKILL after TimeoutStopUSec.
		{Name: "SendSIGKILL", Value: dbus.MakeVariant(true)},
		{Name: "TimeoutStopUSec", Value: dbus.MakeVariant(scopeStopUSec)},
	}
	if bindTo != "" {
		// Stop (not restart) of the bridge's service stops the scope, after
		// the service has stopped (Before= reverses for stop): the bridge
		// drains its children itself; the scope stop only catches what a
		// crashed bridge left behind.
		props = append(props,
			sdbus.Property{Name: "StopPropagatedFrom", Value: dbus.MakeVariant([]string{bindTo})},
			sdbus.PropBefore(bindTo),
		)
	}
	if l.MemoryMax > 0 {
		props = append(props,
			sdbus.Property{Name: "MemoryAccounting", Value: dbus.MakeVariant(true)},
			sdbus.Property{Name: "MemoryMax", Value: dbus.MakeVariant(uint64(l.MemoryMax))},
		)
	}
	if l.TasksMax > 0 {
		props = append(props,
			sdbus.Property{Name: "TasksAccounting", Value: dbus.MakeVariant(true)},
			sdbus.Property{Name: "TasksMax", Value: dbus.MakeVariant(uint64(l.TasksMax))},
		)
	}
	if l.CPUQuota > 0 {
		// CPUQuota=50% is 500 ms of CPU time per second.
		props = append(props, sdbus.Property{Name: "CPUQuotaPerSecUSec", Value: dbus.MakeVariant(l.CPUQuota * 10000)})
	}
	if l.CPUWeight > 0 {
		props = append(props, sdbus.Property{Name: "CPUWeight", Value: dbus.MakeVariant(l.CPUWeight)})
	}
	return props
}

// attrs lists the set limits for a log line.
func (l Limits) attrs() []any {
	var a []any
	if l.MemoryMax > 0 {
		a = append(a, "memory_max", l.MemoryMax)
	}
	if l.TasksMax > 0 {
		a = append(a, "tasks_max", l.TasksMax)
	}
	if l.CPUQuota > 0 {
		a = append(a, "cpu_quota", strconv.FormatUint(l.CPUQuota, 10)+"%")
	}
	if l.CPUWeight > 0 {
		a = append(a, "cpu_weight", l.CPUWeight)
	}
	if len(a) == 0 {
		a = append(a, "limits", "none")
	}
	return a
}

// scopeGroup is one child's transient scope.
type scopeGroup struct {
	p      *ScopePlacer
	id     string
	unit   string
	limits Limits
	gate   Gate
	lock   *scopeLock // held from before the unit is made until it is gone

	pid       int
	attempted bool   // StartTransientUnit was called
	failed    bool   // Started failed after that: the unit may linger
	cgroup    string // ControlGroup property, e.g. /soda.slice/soda-mcp.slice/x.scope
	dir       string // its directory in the mounted hierarchy with cgroup.procs
}

func (g *scopeGroup) String() string { return "scope " + g.unit }

// cgroupDir is the scope's cgroup directory once placed, for the
// supervisor and the ledger.
func (g *scopeGroup) CgroupDir() string { return g.dir }

// OwnsDir reports false: systemd makes and removes a scope's directory.
func (g *scopeGroup) OwnsDir() bool { return false }

func (g *scopeGroup) Prepare(cmd *exec.Cmd) error {
	if g.p.noGate {
		return nil
	}
	return g.gate.Wrap(cmd)
}

// started creates the scope with the gate's pid, waits for the job, checks
// that the gate is inside the scope's cgroup and releases the gate.
func (g *scopeGroup) Started(ctx context.Context, pid int) (err error) {
	defer func() {
		if err != nil && g.attempted {
			g.failed = true
		}
	}()
	g.gate.Started()
	g.pid = pid
	ctx, cancel := context.WithTimeout(ctx, scopeStartTimeout)
	defer cancel()
	// Place the gate only once its runtime is up and blocked (see gate).
	deadline, _ := ctx.Deadline()
	if !g.p.noGate {
		if err := g.gate.WaitReady(deadline); err != nil {
			return err
		}
	}
	conn, err := g.p.connection(ctx)
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("soda child %s of %s", g.id, g.p.prefix)
	props := scopeProperties(desc, g.p.slice, pid, g.p.bindTo, g.limits)
	if g.p.lockDir != "" && g.lock == nil {
		g.lock, err = acquireScopeLock(ctx, g.p.lockDir, g.unit)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return err
		}
		if err != nil {
			// The scope works without; no sweeper will judge it.
			g.p.lockWarn.Do(func() {
				g.p.log.Warn("scopes are not marked as owned: a killed process's scopes are left for systemd's stop propagation alone", "dir", g.p.lockDir, "err", err)
			})
		}
	}
	// The channel must be buffered: go-systemd delivers the job result
	// while holding a lock that every other job of the connection needs.
	done := make(chan string, 1)
	g.attempted = true
	if _, err := conn.StartTransientUnitContext(ctx, g.unit, "fail", props, done); err != nil {
		return fmt.Errorf("start transient unit %s: %w", g.unit, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("start transient unit %s: job %s", g.unit, res)
		}
	case <-ctx.Done():
		return fmt.Errorf("start transient unit %s: waiting for job: %w", g.unit, ctx.Err())
	}
	// Where systemd put it: the kernel says so in /proc/PID/cgroup (one
	// D-Bus round trip less, 0.6-2.5 ms measured in the box); where that
	// cannot be read (ProtectProc=invisible), systemd's ControlGroup.
	cg := scopeCgroupOf(pid, g.unit)
	if cg == "" {
		prop, err := conn.GetUnitTypePropertyContext(ctx, g.unit, "Scope", "ControlGroup")
		if err != nil {
			return fmt.Errorf("read ControlGroup of %s: %w", g.unit, err)
		}
		var ok bool
		cg, ok = prop.Value.Value().(string)
		if !ok || !strings.HasPrefix(cg, "/") {
			return fmt.Errorf("read ControlGroup of %s: unexpected value %s", g.unit, prop.Value.String())
		}
	}
	g.cgroup = cg
	g.dir, err = g.p.fs.dir(cg)
	if err != nil {
		return fmt.Errorf("scope %s: %w", g.unit, err)
	}
	if err := checkInCgroup(pid, cg, g.dir); err != nil {
		return fmt.Errorf("scope %s: %w", g.unit, err)
	}
	if g.p.noGate {
		return nil
	}
	return g.gate.Open()
}

// procs lists the pids in the scope's cgroup; a cgroup that is gone is empty.
func (g *scopeGroup) procs() ([]int, error) {
	if g.dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list processes of %s: %w", g.unit, err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Signal sends sig to every process in the scope.
func (g *scopeGroup) Signal(sig syscall.Signal) error {
	pids, err := g.procs()
	if err != nil {
		// Let systemd do it.
		ctx, cancel := context.WithTimeout(context.Background(), scopeStopTimeout)
		defer cancel()
		conn, cerr := g.p.connection(ctx)
		if cerr != nil {
			return errors.Join(err, cerr)
		}
		if kerr := conn.KillUnitWithTarget(ctx, g.unit, sdbus.All, int32(sig)); kerr != nil && !isNoSuchUnit(kerr) {
			return fmt.Errorf("signal %s: %w", g.unit, kerr)
		}
		return nil
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %d in %s: %w", pid, g.unit, err)
		}
	}
	return nil
}

// cgroupKillFile is the kernel's kill-the-whole-cgroup file (Linux 5.14);
// tests rename it to exercise the fallback.
var cgroupKillFile = "cgroup.kill"

// Kill kills every process in the scope and waits until its cgroup is
// empty: through cgroup.kill where the kernel has it and we may write it
// (a unit with ProtectControlGroups= may not), else by asking systemd to
// send SIGKILL to the unit and sending it to each listed pid until none
// is left.
func (g *scopeGroup) Kill(ctx context.Context) error {
	if g.dir == "" {
		return nil
	}
	killed := false
	killFile := filepath.Join(g.dir, cgroupKillFile)
	if _, err := os.Stat(killFile); err == nil {
		err := os.WriteFile(killFile, []byte("1"), 0)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			killed = true
		} else {
			g.p.log.Debug("cgroup.kill not writable, killing through systemd", "unit", g.unit, "err", err)
		}
	}
	if !killed {
		if conn, err := g.p.connection(ctx); err == nil {
			if err := conn.KillUnitWithTarget(ctx, g.unit, sdbus.All, int32(syscall.SIGKILL)); err != nil && !isNoSuchUnit(err) {
				g.p.log.Debug("kill unit", "unit", g.unit, "err", err)
			}
		}
	}
	var each func() error
	if !killed {
		each = func() error { return g.Signal(syscall.SIGKILL) }
	}
	return waitEmpty(ctx, g, each)
}

// Count reports how many processes the scope's cgroup holds.
func (g *scopeGroup) Count() int {
	pids, err := g.procs()
	if err != nil {
		return 0
	}
	return len(pids)
}

// Release makes sure the unit is gone: an empty scope ends by itself (and
// CollectMode= removes it); one that is not empty is stopped. A failed
// state is reset so nothing is left to list.
func (g *scopeGroup) Release() (err error) {
	g.gate.Close()
	defer func() {
		// The unit is gone unless stopping it failed; then the file stays
		// for a later sweep, unlocked.
		g.lock.release(err == nil)
		g.lock = nil
	}()
	if !g.attempted {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), scopeStopTimeout)
	defer cancel()
	conn, err := g.p.connection(ctx)
	if err != nil {
		return fmt.Errorf("release %s: %w", g.unit, err)
	}
	var errs []error
	stopped := false
	if g.dir == "" || g.failed || g.Count() > 0 {
		stopped = true
		done := make(chan string, 1)
		if _, err := conn.StopUnitContext(ctx, g.unit, "replace", done); err != nil {
			if !isNoSuchUnit(err) {
				errs = append(errs, fmt.Errorf("stop %s: %w", g.unit, err))
			}
		} else {
			select {
			case res := <-done:
				if res != "done" {
					errs = append(errs, fmt.Errorf("stop %s: job %s", g.unit, res))
				}
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("stop %s: waiting for job: %w", g.unit, ctx.Err()))
			}
		}
	}
	// CollectMode=inactive-or-failed removes a unit that ended, failed or
	// not; only one this group had to stop or that failed to start may be
	// left in the failed state.
	if !stopped {
		return errors.Join(errs...)
	}
	if err := conn.ResetFailedUnitContext(ctx, g.unit); err != nil && !isNoSuchUnit(err) {
		errs = append(errs, fmt.Errorf("reset failed state of %s: %w", g.unit, err))
	}
	return errors.Join(errs...)
}

// isNoSuchUnit reports whether err says the unit is not loaded (it is gone
// already).
func isNoSuchUnit(err error) bool {
	var derr dbus.Error
	if errors.As(err, &derr) {
		return derr.Name == "org.freedesktop.systemd1.NoSuchUnit"
	}
	var pderr *dbus.Error
	if errors.As(err, &pderr) {
		return pderr.Name == "org.freedesktop.systemd1.NoSuchUnit"
	}
	return false
}

// checkInCgroup verifies that pid is in cgroup cg (in any hierarchy that
// /proc/PID/cgroup lists), the last check before the gate opens. When
// /proc hides the pid (ProtectProc=invisible and a child of another
// user), the cgroup's own list in dir decides.
// scopeCgroupOf returns the path of unit's cgroup as /proc/PID/cgroup
// shows it in systemd's hierarchy (the unified one, else name=systemd), or
// "" when it cannot be read there or pid is not in unit.
func scopeCgroupOf(pid int, unit string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	return scopeCgroupIn(string(b), unit)
}

// scopeCgroupIn is scopeCgroupOf on the text of a /proc/PID/cgroup.
func scopeCgroupIn(text, unit string) string {
	named := ""
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || !strings.HasSuffix(parts[2], "/"+unit) {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			return parts[2]
		case parts[1] == "name=systemd":
			named = parts[2]
		}
	}
	return named
}

func checkInCgroup(pid int, cg, dir string) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if errors.Is(err, os.ErrNotExist) && dir != "" {
		procs, perr := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if perr != nil {
			return fmt.Errorf("read cgroup of pid %d: %w; %w", pid, err, perr)
		}
		for f := range strings.FieldsSeq(string(procs)) {
			if f == strconv.Itoa(pid) {
				return nil
			}
		}
		return fmt.Errorf("pid %d is not in %s after the job completed", pid, dir)
	}
	if err != nil {
		return fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[2] == cg {
			return nil
		}
	}
	return fmt.Errorf("pid %d is not in %s after the job completed (its cgroups: %s)", pid, cg, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " "))
}

// CheckSystemdPID1 verifies that systemd is PID 1 of our PID namespace, so
// that the pids we pass to it are the ones we mean.
func CheckSystemdPID1() error {
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		return errors.New("not booted with systemd (/run/systemd/system is missing)")
	}
	// Under ProtectProc=invisible with a non-root group, /proc/1 is hidden:
	// then /run/systemd/system and the bus connection are our evidence.
	if comm, err := os.ReadFile("/proc/1/comm"); err == nil {
		if c := strings.TrimSpace(string(comm)); c != "systemd" {
			return fmt.Errorf("PID 1 is %q, not systemd", c)
		}
	}
	// /proc/1 is PID 1 of our namespace only if this /proc belongs to our
	// pid namespace: then it shows us under our own pid. (Comparing
	// /proc/1/ns/pid would need ptrace rights over PID 1.)
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return fmt.Errorf("read /proc/self: %w", err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("/proc belongs to another pid namespace (it shows us as %s, we are %d)", self, os.Getpid())
	}
	return nil
}

// unitNameMax is systemd's limit on unit name length.
const unitNameMax = 255

// unitNameChars are the characters systemd allows in a unit name besides
// "\" escapes ("@" is reserved for templates here).
const unitNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.-"

// escapeUnitPart returns s unchanged if it is usable in a unit name, else
// escaped the way systemd-escape does it.
func escapeUnitPart(s string) string {
	ok := s != "" && s[0] != '.'
	for i := 0; ok && i < len(s); i++ {
		ok = strings.IndexByte(unitNameChars, s[i]) >= 0
	}
	if ok {
		return s
	}
	return unit.UnitNameEscape(s)
}

// checkUnitName verifies that name is a valid unit name with suffix.
func checkUnitName(name, suffix string) error {
	base, ok := strings.CutSuffix(name, suffix)
	switch {
	case !ok || base == "":
		return fmt.Errorf("unit name %q does not end in %s", name, suffix)
	case len(name) > unitNameMax:
		return fmt.Errorf("unit name %q is longer than %d characters", name, unitNameMax)
	case base[0] == '.' || base[0] == '-':
		return fmt.Errorf("unit name %q starts with %q", name, base[0])
	}
	for i := 0; i < len(base); i++ {
		if base[i] != '\\' && strings.IndexByte(unitNameChars, base[i]) < 0 {
			return fmt.Errorf("unit name %q has the invalid character %q", name, base[i])
		}
	}
	return nil
}

// cgroupFS describes the mounted cgroup hierarchies.
type cgroupFS struct {
	unified     string   // cgroup2 mount point ("" if none)
	unifiedRoot string   // its root inside the hierarchy (mountinfo field 4)
	named       string   // name=systemd (v1) mount point ("" if none)
	namedRoot   string   // its root
	v1          []string // controllers bound to v1 hierarchies
	v2          []string // controllers available at the cgroup2 root
}

// cgroupV1Options are super options of a v1 cgroup mount that are not
// controllers.
var cgroupV1Options = []string{"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods"}

// ownCgroupFS reads this process's cgroup mounts.
func ownCgroupFS() (cgroupFS, error) {
	ms, err := readMounts()
	if err != nil {
		return cgroupFS{}, err
	}
	return ms.fs()
}

// fs describes the hierarchies of ms.
func (ms cgroupMounts) fs() (cgroupFS, error) {
	var fs cgroupFS
	for _, m := range ms {
		switch m.FSType {
		case "cgroup2":
			if fs.unified == "" {
				fs.unified, fs.unifiedRoot = m.Mountpoint, m.Root
			}
		case "cgroup":
			for o := range strings.SplitSeq(m.VFSOptions, ",") {
				switch {
				case o == "name=systemd":
					if fs.named == "" {
						fs.named, fs.namedRoot = m.Mountpoint, m.Root
					}
				case o == "" || strings.Contains(o, "=") || slices.Contains(cgroupV1Options, o):
				default:
					fs.v1 = append(fs.v1, o)
				}
			}
		}
	}
	if fs.unified == "" && fs.named == "" {
		return fs, errors.New("neither a cgroup2 nor a name=systemd hierarchy is mounted")
	}
	if fs.unified != "" {
		if b, err := os.ReadFile(filepath.Join(fs.unified, "cgroup.controllers")); err == nil {
			fs.v2 = strings.Fields(string(b))
		}
	}
	return fs, nil
}

// dir returns the directory of cgroup cg (a ControlGroup value) with its
// cgroup.procs: in the unified hierarchy (/sys/fs/cgroup on unified hosts,
// /sys/fs/cgroup/unified on hybrid ones), else in systemd's named v1
// hierarchy (legacy hosts).
func (fs cgroupFS) dir(cg string) (string, error) {
	var tried []string
	for _, m := range [][2]string{{fs.unified, fs.unifiedRoot}, {fs.named, fs.namedRoot}} {
		if m[0] == "" {
			continue
		}
		rel := cg
		if m[1] != "/" && m[1] != "" {
			r, ok := strings.CutPrefix(cg, m[1])
			if !ok {
				continue
			}
			rel = r
		}
		d := filepath.Join(m[0], rel)
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	return "", fmt.Errorf("cgroup %s not found (tried %s)", cg, strings.Join(tried, ", "))
}

// unenforced lists the set limits whose controller the kernel does not
// offer to systemd (neither at the cgroup2 root nor as a v1 hierarchy):
// systemd accepts them but cannot enforce them.
func (fs cgroupFS) unenforced(l Limits) []string {
	has := func(c string) bool { return slices.Contains(fs.v2, c) || slices.Contains(fs.v1, c) }
	var out []string
	if l.MemoryMax > 0 && !has("memory") {
		out = append(out, "MemoryMax")
	}
	if l.TasksMax > 0 && !has("pids") {
		out = append(out, "TasksMax")
	}
	if l.CPUQuota > 0 && !has("cpu") {
		out = append(out, "CPUQuota")
	}
	if l.CPUWeight > 0 && !has("cpu") {
		out = append(out, "CPUWeight")
	}
	return out
}
