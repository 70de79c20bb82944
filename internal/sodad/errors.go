package sodad

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// The kinds of sodad's errors. The code behind the methods returns plain
// Go errors, each of one of these kinds (errorf) or of none; only
// busError, at the method boundary, turns one into a D-Bus error, by
// busNames. An error of no kind is Failed.
var (
	errNoSuchProfile    = errors.New("no such profile")
	errNoSuchSandbox    = errors.New("no such sandbox")
	errExceedsProfile   = errors.New("exceeds the profile")
	errInvalidSpec      = errors.New("invalid spec")
	errInvalidTarget    = errors.New("invalid target")
	errInvalidFd        = errors.New("invalid fd")
	errNotRunning       = errors.New("not running")
	errNotPersistent    = errors.New("not persistent")
	errDraining         = errors.New("draining")
	errTooManySandboxes = errors.New("too many sandboxes")
	errInteractiveAuth  = errors.New("interactive authorization required")
	errAccessDenied     = errors.New("access denied")
	errInvalidArgs      = errors.New("invalid arguments")
	errNotSupported     = errors.New("not supported")
)

// busNames is the D-Bus error name of each kind: the one table.
var busNames = map[error]string{
	errNoSuchProfile:    sodadapi.ErrorNoSuchProfile,
	errNoSuchSandbox:    sodadapi.ErrorNoSuchSandbox,
	errExceedsProfile:   sodadapi.ErrorExceedsProfile,
	errInvalidSpec:      sodadapi.ErrorInvalidSpec,
	errInvalidTarget:    sodadapi.ErrorInvalidTarget,
	errInvalidFd:        sodadapi.ErrorInvalidFd,
	errNotRunning:       sodadapi.ErrorNotRunning,
	errNotPersistent:    sodadapi.ErrorNotPersistent,
	errDraining:         sodadapi.ErrorDraining,
	errTooManySandboxes: sodadapi.ErrorTooManySandboxes,
	errInteractiveAuth:  sodadapi.ErrorInteractiveAuth,
	errAccessDenied:     sodadapi.ErrorAccessDenied,
	errInvalidArgs:      sodadapi.ErrorInvalidArgs,
	errNotSupported:     sodadapi.ErrorNotSupported,
}

// kindError is an error of a kind: its message is the caller's to read,
// the kind only says which D-Bus error it becomes. errors.Is finds both
// the kind and whatever the message wraps (%w).
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// errorf is an error of kind with the message format makes (%w wraps,
// as fmt.Errorf does).
func errorf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, a...)}
}

// busError is err as a method's D-Bus error: the name of its outermost
// kind (Failed for none), its message as the one argument.
func busError(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	var ke *kindError
	if errors.As(err, &ke) {
		if name, ok := busNames[ke.kind]; ok {
			return dbus.NewError(name, []any{err.Error()})
		}
	}
	return dbus.NewError(sodadapi.ErrorFailed, []any{err.Error()})
}
