//go:build !linux

package child

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// errNeedLinux is what every function that would start, place or recover
// a child returns on other systems.
var errNeedLinux = errors.New("child processes need Linux (cgroups, systemd scopes, parent-death signals)")

// Process is a running child. On this system Start fails, so there is
// none: the type only lets the packages that start children build.
type Process struct {
	// Stdin is the write end of the child's stdin.
	Stdin *os.File
	// Stdout is the read end of the child's stdout.
	Stdout *os.File
	// Stderr is the read end of the child's stderr.
	Stderr *os.File
}

// Start fails on this system: children need Linux.
func Start(ctx context.Context, log *slog.Logger, placer Placer, id string, spec Spec) (*Process, error) {
	return nil, errNeedLinux
}

// Pid returns the child's process id.
func (p *Process) Pid() int { return 0 }

// Group returns the group the child runs in.
func (p *Process) Group() Group { return nil }

// Exited is closed when the child process (not its descendants) has exited.
func (p *Process) Exited() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// ExitStatus describes how the child ended; valid after Exited is closed.
func (p *Process) ExitStatus() string { return errNeedLinux.Error() }

// Stop shuts the child down; there is none on this system.
func (p *Process) Stop(grace Grace) {}

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

// OpenLedger fails on this system: the ledger reads process start times
// from /proc.
func OpenLedger(dir string) (*Ledger, error) { return nil, errNeedLinux }

// Recover kills what is left of every child recorded by a process that no
// longer runs; on this system there is nothing to recover.
func (l *Ledger) Recover(ctx context.Context, log *slog.Logger, scopes *ScopePlacer) (int, error) {
	return 0, errNeedLinux
}

// Close does nothing on this system, where no ledger is ever opened.
func (l *Ledger) Close() error { return nil }

// RemoveLockDir does nothing on this system, where no scope lock is ever
// taken.
func RemoveLockDir(dir string) error { return nil }

// IsGate reports whether this process was started as a child's gate or
// supervisor; never on this system, where children are not started.
func IsGate() bool { return false }

// RunGate is called when IsGate reports true, which it never does on this
// system; it writes one line to stderr and exits.
func RunGate() {
	fmt.Fprintln(os.Stderr, "soda-child-gate:", errNeedLinux)
	os.Exit(127)
}
