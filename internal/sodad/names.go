package sodad

import (
	"strings"

	"github.com/godbus/dbus/v5"
)

// The names of the API (docs/dbus-api.md, "Names").
const (
	// BusName is sodad's well-known name on the system bus.
	BusName = "io.github.soda_project.Soda1"
	// ManagerPath is the Manager object.
	ManagerPath = dbus.ObjectPath("/io/github/soda_project/Soda1")
	// SandboxPathPrefix is the parent of every sandbox object.
	SandboxPathPrefix = "/io/github/soda_project/Soda1/sandbox"
	// ManagerInterface and SandboxInterface are sodad's interfaces.
	ManagerInterface = "io.github.soda_project.Soda1.Manager"
	SandboxInterface = "io.github.soda_project.Soda1.Sandbox"
	// ErrorPrefix starts every error name of sodad's own.
	ErrorPrefix = "io.github.soda_project.Soda1.Error."
)

// The polkit actions, one per operation.
const (
	ActionCreate        = "io.github.soda_project.soda1.create"
	ActionGrant         = "io.github.soda_project.soda1.grant"
	ActionBeyondProfile = "io.github.soda_project.soda1.beyond-profile"
	ActionManageOther   = "io.github.soda_project.soda1.manage-other"
)

// SandboxPath is the object path of the sandbox id, escaped as
// sd_bus_path_encode does: ASCII letters and digits stay, except a leading
// digit; every other byte is "_" and two lower-case hex digits.
func SandboxPath(id string) dbus.ObjectPath {
	return dbus.ObjectPath(SandboxPathPrefix + "/" + escapePathLabel(id))
}

func escapePathLabel(s string) string {
	if s == "" {
		return "_"
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		digit := c >= '0' && c <= '9'
		if alpha || digit && i > 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// Error names (docs/dbus-api.md, "Errors").
const (
	ErrNoSuchProfile    = ErrorPrefix + "NoSuchProfile"
	ErrNoSuchSandbox    = ErrorPrefix + "NoSuchSandbox"
	ErrExceedsProfile   = ErrorPrefix + "ExceedsProfile"
	ErrInvalidSpec      = ErrorPrefix + "InvalidSpec"
	ErrInvalidTarget    = ErrorPrefix + "InvalidTarget"
	ErrInvalidFd        = ErrorPrefix + "InvalidFd"
	ErrNotRunning       = ErrorPrefix + "NotRunning"
	ErrNotPersistent    = ErrorPrefix + "NotPersistent"
	ErrDraining         = ErrorPrefix + "Draining"
	ErrTooManySandboxes = ErrorPrefix + "TooManySandboxes"
	ErrInteractiveAuth  = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	ErrAccessDenied     = "org.freedesktop.DBus.Error.AccessDenied"
	ErrInvalidArgs      = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrNotSupported     = "org.freedesktop.DBus.Error.NotSupported"
	ErrFailed           = "org.freedesktop.DBus.Error.Failed"
)

// dbusErr is a D-Bus error with one message.
func dbusErr(name, msg string) *dbus.Error {
	return dbus.NewError(name, []any{msg})
}
