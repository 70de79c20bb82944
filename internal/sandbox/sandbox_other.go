//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/llmgateway"
)

// errNeedLinux is what every function that would build, adopt or reach a
// sandbox returns on other systems.
var errNeedLinux = errors.New("sandboxes need Linux (namespaces, Landlock, seccomp, cgroups)")

// Linux is the Linux sandbox engine. On this system New fails, so there
// is none: the type only lets the packages that start sandboxes build.
type Linux struct{}

// New fails on this system: sandboxes need Linux.
func New(cfg Config) (*Linux, error) { return nil, errNeedLinux }

// Start launches spec's command in a new sandbox; not on this system.
func (e *Linux) Start(ctx context.Context, spec Spec) (*Sandbox, error) { return nil, errNeedLinux }

// Adopt takes over a live sandbox handed over by another supervisor; not
// on this system.
func (e *Linux) Adopt(ctx context.Context, st HandoverState, files map[string]*os.File) (*Sandbox, error) {
	return nil, errNeedLinux
}

// SweepLeftovers removes what sandboxes whose owner was killed left
// behind; there are none on this system.
func (e *Linux) SweepLeftovers(ctx context.Context) ([]string, error) { return nil, errNeedLinux }

// NewHome makes an empty private home for one sandbox; not on this system.
func (e *Linux) NewHome(dir string) (string, error) { return "", errNeedLinux }

// Close releases what the engine holds for all its sandboxes.
func (e *Linux) Close() error { return nil }

// Sandbox is a running sandbox. On this system none starts.
type Sandbox struct {
	ID string
}

// State returns what a successor needs to adopt sb now.
func (sb *Sandbox) State() HandoverState { return HandoverState{ID: sb.ID} }

// Handover returns sb's state and copies of the descriptors a successor
// needs; not on this system.
func (sb *Sandbox) Handover() (HandoverState, map[string]*os.File, error) {
	return HandoverState{}, nil, errNeedLinux
}

// Detach lets go of a sandbox that was handed over.
func (sb *Sandbox) Detach() {}

// RecordModel adds a request through the run's model gateway to the
// sandbox's audit trail.
func (sb *Sandbox) RecordModel(ev llmgateway.Event) {}

// SetEgress changes what the running sandbox may reach; not on this
// system.
func (sb *Sandbox) SetEgress(ctx context.Context, by string, add, remove []egress.Grant) error {
	return errNeedLinux
}

// LimitEvents counts how often the sandbox's memory and task limits struck.
func (sb *Sandbox) LimitEvents() (cgroup.LimitEvents, error) {
	return cgroup.LimitEvents{}, errNeedLinux
}

// Exec runs es in the live sandbox; not on this system.
func (sb *Sandbox) Exec(ctx context.Context, es ExecSpec) (ExitStatus, error) {
	return ExitStatus{}, errNeedLinux
}

// Close ends a live sandbox.
func (sb *Sandbox) Close(ctx context.Context) error { return errNeedLinux }

// Stop asks the sandbox to end.
func (sb *Sandbox) Stop() {}

// Signal sends sig to the sandbox's init; not on this system.
func (sb *Sandbox) Signal(sig syscall.Signal) error { return errNeedLinux }

// Wait waits for the command to end; not on this system.
func (sb *Sandbox) Wait(ctx context.Context) (ExitStatus, error) { return ExitStatus{}, errNeedLinux }

// OpenAuditFile opens the audit file at path for appending. On this
// system it fails: the checks that keep a sandbox from choosing what its
// caller writes to rely on openat2(2), and there are no sandboxes to
// audit.
func OpenAuditFile(path string, grants []string) (*os.File, error) { return nil, errNeedLinux }

// IsTerminal reports whether f is a terminal; on this system, where no
// sandbox is attached to one, it reports false.
func IsTerminal(f *os.File) bool { return false }

// MakeRaw puts the terminal tty in raw mode; not on this system.
func MakeRaw(tty *os.File) (restore func() error, err error) { return nil, errNeedLinux }

// SaveTerminal records the settings of the terminal f; not on this system.
func SaveTerminal(f *os.File) (restore func() error, err error) { return nil, errNeedLinux }
