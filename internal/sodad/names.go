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

// The polkit actions, one per operation (polkit/io.github.soda_project.soda1.policy
// has their defaults). An operation on one's own sandbox asks for the
// plain action, on another user's for its -other variant.
const (
	// ActionCreate is CreateSandbox within the profile.
	ActionCreate = "io.github.soda_project.soda1.create"
	// ActionGrant is Grant on one's own sandbox within its profile.
	ActionGrant = "io.github.soda_project.soda1.grant"
	// ActionBeyondProfile is CreateSandbox or Grant beyond the profile.
	ActionBeyondProfile = "io.github.soda_project.soda1.beyond-profile"
	// ActionExec is Exec and ExecEx in one's own sandbox.
	ActionExec = "io.github.soda_project.soda1.exec"
	// ActionKill is Kill of one's own sandbox.
	ActionKill = "io.github.soda_project.soda1.kill"
	// ActionReadAudit is ReadAudit of one's own sandbox.
	ActionReadAudit = "io.github.soda_project.soda1.read-audit"
	// ActionExecOther is Exec and ExecEx in another user's sandbox.
	ActionExecOther = "io.github.soda_project.soda1.exec-other"
	// ActionKillOther is Kill of another user's sandbox.
	ActionKillOther = "io.github.soda_project.soda1.kill-other"
	// ActionGrantOther is Grant and Revoke on another user's sandbox (a
	// Grant asks for grant or beyond-profile as well).
	ActionGrantOther = "io.github.soda_project.soda1.grant-other"
	// ActionReadAuditOther is ReadAudit of another user's sandbox.
	ActionReadAuditOther = "io.github.soda_project.soda1.read-audit-other"
	// ActionManageOther is seeing another user's sandboxes (ListSandboxes,
	// GetSandbox, properties); it implies every -other action.
	ActionManageOther = "io.github.soda_project.soda1.manage-other"
)

// Operations on an existing sandbox: the action its owner needs ("" for
// none) and the one anyone else needs.
type operation struct{ own, other string }

// The operations on an existing sandbox.
var (
	opExec      = operation{ActionExec, ActionExecOther}
	opKill      = operation{ActionKill, ActionKillOther}
	opReadAudit = operation{ActionReadAudit, ActionReadAuditOther}
	// opRevoke only narrows what the sandbox reaches: its owner needs
	// nothing.
	opRevoke = operation{"", ActionGrantOther}
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
