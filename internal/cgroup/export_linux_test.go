package cgroup

// Hooks for the systemd scope placer's integration tests, which start
// children through internal/child and so live in the external test package
// (cgroup_test): internal/child imports this package.

import (
	"context"
	"log/slog"
	"testing"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// ScopeGroup is a child's scope, as a ScopePlacer's NewGroup returns it.
type ScopeGroup = scopeGroup

// NewTestLogger logs to t.
func NewTestLogger(t *testing.T) *slog.Logger { return testLogger(t) }

// ControlGroup is the scope's cgroup, as systemd names it.
func (g *scopeGroup) ControlGroup() string { return g.cgroup }

// Procs lists the scope's processes.
func (g *scopeGroup) Procs() ([]int, error) { return g.procs() }

// DropLock gives up the scope's owner lock, as the owner's death does.
func (g *scopeGroup) DropLock() {
	g.lock.release(false)
	g.lock = nil
}

// Connection is the placer's D-Bus connection to systemd.
func (p *ScopePlacer) Connection(ctx context.Context) (*sdbus.Conn, error) { return p.connection(ctx) }

// NamedV1 reports whether systemd's named v1 hierarchy is mounted.
func (p *ScopePlacer) NamedV1() bool { return p.fs.named != "" }

// V1Controllers lists the controllers bound to v1 hierarchies.
func (p *ScopePlacer) V1Controllers() []string { return p.fs.v1 }

// UnenforcedOf lists the limits of l this host cannot enforce.
func (p *ScopePlacer) UnenforcedOf(l Limits) []string { return p.fs.unenforced(l) }

// BindTo is the service whose stop propagates to the scopes.
func (p *ScopePlacer) BindTo() string { return p.bindTo }

// SetBindTo sets the service whose stop propagates to the scopes.
func (p *ScopePlacer) SetBindTo(unit string) { p.bindTo = unit }

// SetPrefix sets the prefix of the placer's unit names.
func (p *ScopePlacer) SetPrefix(prefix string) { p.prefix = prefix }

// GlobEscape escapes s for a unit name pattern.
func GlobEscape(s string) string { return globEscape(s) }

// SetCgroupKillFile makes scopes kill through the file name instead of
// cgroup.kill, until the function it returns is called.
func SetCgroupKillFile(name string) (restore func()) {
	old := cgroupKillFile
	cgroupKillFile = name
	return func() { cgroupKillFile = old }
}

// ScopeStopUSec is a scope's TimeoutStopUSec.
const ScopeStopUSec = scopeStopUSec
