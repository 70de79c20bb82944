package sodadclient

import (
	"errors"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// Error is a D-Bus error from sodad (or the bus on its behalf), with what
// failed and what to do about it.
type Error struct {
	Op      string // what was asked: "create a sandbox from profile dev"
	Name    string // the D-Bus error name
	Message string // sodad's message, if any
}

// ErrorKind is a sentinel for one of sodad's D-Bus error names: what a
// call returns is errors.Is the sentinel of its name (ErrNoSuchSandbox,
// ...), whatever its message and however it is wrapped.
type ErrorKind string

// Error is the D-Bus error name.
func (k ErrorKind) Error() string { return string(k) }

// The sentinels of the error names sodad answers with (docs/dbus-api.md,
// "Errors").
const (
	ErrNoSuchProfile    = ErrorKind(sodadapi.ErrorNoSuchProfile)
	ErrNoSuchSandbox    = ErrorKind(sodadapi.ErrorNoSuchSandbox)
	ErrExceedsProfile   = ErrorKind(sodadapi.ErrorExceedsProfile)
	ErrInvalidSpec      = ErrorKind(sodadapi.ErrorInvalidSpec)
	ErrInvalidTarget    = ErrorKind(sodadapi.ErrorInvalidTarget)
	ErrInvalidFd        = ErrorKind(sodadapi.ErrorInvalidFd)
	ErrNotRunning       = ErrorKind(sodadapi.ErrorNotRunning)
	ErrNotPersistent    = ErrorKind(sodadapi.ErrorNotPersistent)
	ErrDraining         = ErrorKind(sodadapi.ErrorDraining)
	ErrTooManySandboxes = ErrorKind(sodadapi.ErrorTooManySandboxes)
	ErrInteractiveAuth  = ErrorKind(sodadapi.ErrorInteractiveAuth)
	ErrAccessDenied     = ErrorKind(sodadapi.ErrorAccessDenied)
	ErrInvalidArgs      = ErrorKind(sodadapi.ErrorInvalidArgs)
	ErrNotSupported     = ErrorKind(sodadapi.ErrorNotSupported)
	ErrFailed           = ErrorKind(sodadapi.ErrorFailed)
)

// Is makes errors.Is(err, ErrX) hold for an *Error of ErrX's name.
func (e *Error) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && string(k) == e.Name
}

// hints say what to do about each error (docs/dbus-api.md, "Errors").
var hints = map[string]string{
	sodadapi.ErrorNoSuchProfile:    "'sodactl sandbox profiles' lists the profiles you may use",
	sodadapi.ErrorNoSuchSandbox:    "'sodactl sandbox list' lists the sandboxes you may see",
	sodadapi.ErrorExceedsProfile:   "ask for no more than the profile allows ('sodactl sandbox profiles'), or ask an administrator for a polkit rule granting " + sodadapi.ActionBeyondProfile,
	sodadapi.ErrorInvalidSpec:      "correct the option it names",
	sodadapi.ErrorInvalidTarget:    "a target is HOST:PORT (*.example.com:443 for every subdomain) or mcp:NAME",
	sodadapi.ErrorInvalidFd:        "pass a readable stdin, writable stdout and stderr, or a terminal",
	sodadapi.ErrorNotRunning:       "the sandbox has already exited ('sodactl sandbox status ID')",
	sodadapi.ErrorDraining:         "sodad is stopping; try again once it is back, or run with --direct",
	sodadapi.ErrorTooManySandboxes: "end one of your sandboxes ('sodactl sandbox list', 'sodactl sandbox kill ID') or ask an administrator to raise the limit",

	sodadapi.ErrorInteractiveAuth:                  "polkit wants a password: run it on a terminal (with an authentication agent), or ask an administrator for a polkit rule",
	sodadapi.ErrorAccessDenied:                     "polkit refused: ask an administrator for a polkit rule (see docs/dbus-api.md, Authorization)",
	sodadapi.ErrorInvalidArgs:                      "this sodactl and sodad disagree on the API; check their versions",
	"org.freedesktop.DBus.Error.UnknownMethod":     "this sodad does not offer it; check that sodactl and sodad have the same version",
	"org.freedesktop.DBus.Error.UnknownObject":     "the sandbox is gone ('sodactl sandbox list')",
	"org.freedesktop.DBus.Error.ServiceUnknown":    "sodad is not running and cannot be started: install or start sodad.service, or run with --direct",
	"org.freedesktop.DBus.Error.NameHasNoOwner":    "sodad is not running: start sodad.service, or run with --direct",
	"org.freedesktop.DBus.Error.Spawn.ChildExited": "sodad failed to start: see 'journalctl -u sodad'",
	"org.freedesktop.DBus.Error.NoReply":           "sodad did not answer: see 'journalctl -u sodad'",
	"org.freedesktop.DBus.Error.Timeout":           "sodad did not answer: see 'journalctl -u sodad'",
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	if e.Message != "" {
		b.WriteString(e.Message)
	} else {
		b.WriteString(strings.TrimPrefix(e.Name, sodadapi.ErrorPrefix))
	}
	fmt.Fprintf(&b, " (%s)", e.Name)
	if h := hints[e.Name]; h != "" {
		b.WriteString(": ")
		b.WriteString(h)
	}
	return b.String()
}

// ErrorName returns the D-Bus error name in err's chain, or "".
func ErrorName(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Name
	}
	return ""
}

// wrap turns a D-Bus error into an *Error saying what op was; other
// errors (a closed connection) are wrapped as they are.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var de dbus.Error
	var dep *dbus.Error
	switch {
	case errors.As(err, &de):
	case errors.As(err, &dep):
		de = *dep
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	e := &Error{Op: op, Name: de.Name}
	if len(de.Body) > 0 {
		if s, ok := de.Body[0].(string); ok {
			e.Message = s
		}
	}
	return e
}
