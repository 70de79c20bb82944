//go:build !linux

package cgroup

import (
	"context"
	"errors"
	"log/slog"
)

// errNeedLinux is what every function that would place a child returns on
// other systems.
var errNeedLinux = errors.New("child processes need Linux (cgroups, systemd scopes, parent-death signals)")

// NewPlacer returns, on this system, a placer whose every NewGroup fails:
// children need Linux.
func NewPlacer(log *slog.Logger, prefix string, limits Limits) Placer {
	return noPlacer{}
}

// noPlacer is NewPlacer's placer on other systems.
type noPlacer struct{}

func (noPlacer) NewGroup(id string) (Group, error) { return nil, errNeedLinux }
func (noPlacer) Mode() string                      { return "none" }
func (noPlacer) Unenforced() []string {
	return []string{"MemoryMax", "TasksMax", "CPUWeight", "CPUQuota"}
}

// ScopePlacer puts each child in its own transient systemd scope. On this
// system NewSystemdPlacer fails, so there is none.
type ScopePlacer struct{}

// NewSystemdPlacer fails on this system: systemd scopes need Linux.
func NewSystemdPlacer(ctx context.Context, log *slog.Logger, prefix, slice string, limits Limits) (*ScopePlacer, error) {
	return nil, errNeedLinux
}

// WithLockDir sets the directory of the lock files that mark live owners.
func (p *ScopePlacer) WithLockDir(dir string) {}

// SweepLeftovers stops the scopes a killed predecessor left; there are
// none on this system.
func (p *ScopePlacer) SweepLeftovers(ctx context.Context) ([]string, error) {
	return nil, errNeedLinux
}

// NewGroup creates the group for a child identified by id.
func (p *ScopePlacer) NewGroup(id string) (Group, error) { return nil, errNeedLinux }

// Mode names the isolation.
func (p *ScopePlacer) Mode() string { return "systemd-scope" }

// Unenforced lists the configured limits this placer cannot enforce.
func (p *ScopePlacer) Unenforced() []string { return nil }

// RemoveLockDir does nothing on this system, where no scope lock is ever
// taken.
func RemoveLockDir(dir string) error { return nil }

// Warmer starts cgroup v1 migrations that move nothing; there are none
// on this system.
type Warmer struct{}

// NewWarmer returns nil on this system.
func NewWarmer() *Warmer { return nil }

// Warm does nothing on this system.
func (w *Warmer) Warm() {}
