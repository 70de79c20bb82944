// Package sodadapi is what sodad and its clients share of sodad's D-Bus
// API (docs/dbus-api.md): its names, object paths and interfaces, its error
// names, the polkit actions it asks for, and the types of the arguments
// one side builds and the other reads. sodad (internal/sodad) and its
// client (internal/sodadclient) both import it, so that neither keeps a
// copy of the other's names.
package sodadapi

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
	// ManagerInterface creates, lists and looks up sandboxes.
	ManagerInterface = BusName + ".Manager"
	// SandboxInterface is implemented by each sandbox's object.
	SandboxInterface = BusName + ".Sandbox"
	// ErrorPrefix starts every error name of sodad's own.
	ErrorPrefix = BusName + ".Error."
)

// The error names sodad answers with (docs/dbus-api.md, "Errors"): its
// own, then the standard ones it uses.
const (
	ErrorNoSuchProfile    = ErrorPrefix + "NoSuchProfile"
	ErrorNoSuchSandbox    = ErrorPrefix + "NoSuchSandbox"
	ErrorExceedsProfile   = ErrorPrefix + "ExceedsProfile"
	ErrorInvalidSpec      = ErrorPrefix + "InvalidSpec"
	ErrorInvalidTarget    = ErrorPrefix + "InvalidTarget"
	ErrorInvalidFd        = ErrorPrefix + "InvalidFd"
	ErrorNotRunning       = ErrorPrefix + "NotRunning"
	ErrorNotPersistent    = ErrorPrefix + "NotPersistent"
	ErrorDraining         = ErrorPrefix + "Draining"
	ErrorTooManySandboxes = ErrorPrefix + "TooManySandboxes"
	ErrorInteractiveAuth  = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	ErrorAccessDenied     = "org.freedesktop.DBus.Error.AccessDenied"
	ErrorInvalidArgs      = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrorNotSupported     = "org.freedesktop.DBus.Error.NotSupported"
	ErrorFailed           = "org.freedesktop.DBus.Error.Failed"
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

// SandboxPath is the object path of the sandbox id, escaped as
// sd_bus_path_encode does: ASCII letters and digits stay, except a leading
// digit; every other byte is "_" and two lower-case hex digits.
func SandboxPath(id string) dbus.ObjectPath {
	return dbus.ObjectPath(SandboxPathPrefix + "/" + PathLabel(id))
}

// PathLabel is id escaped as one label of an object path (SandboxPath).
func PathLabel(s string) string {
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

// SandboxEntry is one entry of ListSandboxes, (susso).
type SandboxEntry struct {
	ID      string
	Owner   uint32
	Profile string
	State   string
	Path    dbus.ObjectPath
}

// ProfileEntry is one entry of ListProfiles, (ss).
type ProfileEntry struct {
	Name        string
	Description string
}

// RunServer is one of the caller's own MCP servers for a sandbox (spec
// RunMCP): exactly one of Port (a server the caller runs on 127.0.0.1,
// with its Token), URL (a remote one, with its Headers) or Command (a
// stdio server the agent starts inside the sandbox, with Args and Env).
type RunServer struct {
	Name    string
	Port    uint16
	Token   string
	URL     string
	Headers map[string]string
	Command string
	Args    []string
	Env     map[string]string
}

// RunServerEntry is a RunServer as it travels in spec RunMCP, (sa{sv}):
// its name and its set fields by their names.
type RunServerEntry struct {
	Name  string
	Props map[string]dbus.Variant
}

// Entry is r as it travels: its zero fields are left out.
func (r RunServer) Entry() RunServerEntry {
	p := map[string]dbus.Variant{}
	if r.Port != 0 {
		p["Port"] = dbus.MakeVariant(r.Port)
	}
	for k, v := range map[string]string{"Token": r.Token, "URL": r.URL, "Command": r.Command} {
		if v != "" {
			p[k] = dbus.MakeVariant(v)
		}
	}
	if r.Args != nil {
		p["Args"] = dbus.MakeVariant(r.Args)
	}
	if r.Headers != nil {
		p["Headers"] = dbus.MakeVariant(r.Headers)
	}
	if r.Env != nil {
		p["Env"] = dbus.MakeVariant(r.Env)
	}
	return RunServerEntry{Name: r.Name, Props: p}
}

// Mask is a file the sandbox sees with Data as its contents (spec Masks),
// as it travels, (say).
type Mask struct {
	Path string
	Data []byte
}
