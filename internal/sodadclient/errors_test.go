package sodadclient

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// TestErrorKinds: what a call returns for each of sodad's error names is
// errors.Is that name's sentinel and no other, wrapped or not, and keeps
// its message and hint.
func TestErrorKinds(t *testing.T) {
	kinds := []struct {
		kind ErrorKind
		name string
	}{
		{ErrNoSuchProfile, sodadapi.ErrorNoSuchProfile},
		{ErrNoSuchSandbox, sodadapi.ErrorNoSuchSandbox},
		{ErrExceedsProfile, sodadapi.ErrorExceedsProfile},
		{ErrInvalidSpec, sodadapi.ErrorInvalidSpec},
		{ErrInvalidTarget, sodadapi.ErrorInvalidTarget},
		{ErrInvalidFd, sodadapi.ErrorInvalidFd},
		{ErrNotRunning, sodadapi.ErrorNotRunning},
		{ErrNotPersistent, sodadapi.ErrorNotPersistent},
		{ErrDraining, sodadapi.ErrorDraining},
		{ErrTooManySandboxes, sodadapi.ErrorTooManySandboxes},
		{ErrInteractiveAuth, sodadapi.ErrorInteractiveAuth},
		{ErrAccessDenied, sodadapi.ErrorAccessDenied},
		{ErrInvalidArgs, sodadapi.ErrorInvalidArgs},
		{ErrNotSupported, sodadapi.ErrorNotSupported},
		{ErrFailed, sodadapi.ErrorFailed},
	}
	for _, tc := range kinds {
		t.Run(tc.name, func(t *testing.T) {
			// godbus returns a dbus.Error or a *dbus.Error: both.
			for _, de := range []error{dbus.Error{Name: tc.name, Body: []any{"it failed"}}, dbus.NewError(tc.name, []any{"it failed"})} {
				err := wrap("kill sandbox a", de)
				for _, e := range []error{err, fmt.Errorf("sodactl: %w", err)} {
					for _, other := range kinds {
						if got := errors.Is(e, other.kind); got != (other.kind == tc.kind) {
							t.Errorf("errors.Is(%v, %s) = %v", e, other.kind, got)
						}
					}
				}
				if ErrorName(err) != tc.name || !strings.HasPrefix(err.Error(), "kill sandbox a: it failed ("+tc.name+")") {
					t.Errorf("error %q, name %q", err, ErrorName(err))
				}
				if h := hints[tc.name]; h != "" && !strings.HasSuffix(err.Error(), ": "+h) {
					t.Errorf("error %q: no hint %q", err, h)
				}
			}
		})
	}
	// Not one of sodad's: no sentinel, and an error that is no D-Bus error
	// is none either.
	for _, err := range []error{
		wrap("list sandboxes", dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown"}),
		wrap("list sandboxes", errors.New("connection closed")),
	} {
		for _, k := range kinds {
			if errors.Is(err, k.kind) {
				t.Errorf("errors.Is(%v, %s)", err, k.kind)
			}
		}
	}
	if wrap("x", nil) != nil {
		t.Errorf("wrap(nil) is not nil")
	}
}
