//go:build !linux

package child

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/soda-project/soda/internal/cgroup"
)

// errNeedLinux is what every function that would start or recover a
// child returns on other systems.
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
func Start(ctx context.Context, log *slog.Logger, placer cgroup.Placer, id string, spec Spec) (*Process, error) {
	return nil, errNeedLinux
}

// Pid returns the child's process id.
func (p *Process) Pid() int { return 0 }

// Group returns the group the child runs in.
func (p *Process) Group() cgroup.Group { return nil }

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

// OpenLedger fails on this system: the ledger reads process start times
// from /proc.
func OpenLedger(dir string) (*Ledger, error) { return nil, errNeedLinux }

// Recover kills what is left of every child recorded by a process that no
// longer runs; on this system there is nothing to recover.
func (l *Ledger) Recover(ctx context.Context, log *slog.Logger, scopes *cgroup.ScopePlacer) (int, error) {
	return 0, errNeedLinux
}

// Close does nothing on this system, where no ledger is ever opened.
func (l *Ledger) Close() error { return nil }

// IsGate reports whether this process was started as a child's gate or
// supervisor; never on this system, where children are not started.
func IsGate() bool { return false }

// RunGate is called when IsGate reports true, which it never does on this
// system; it writes one line to stderr and exits.
func RunGate() {
	fmt.Fprintln(os.Stderr, "soda-child-gate:", errNeedLinux)
	os.Exit(127)
}
