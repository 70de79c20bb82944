package sodad

import (
	"sort"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"

	"github.com/soda-project/soda/internal/sodadapi"
)

const constAnn = `<annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>`

// silentAnn marks a property that changes without PropertiesChanged.
const silentAnn = `<annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>`

// managerXML is the Manager interface as docs/dbus-api.md gives it.
const managerXML = `<interface name="` + sodadapi.ManagerInterface + `">
  <method name="CreateSandbox">
   <arg name="profile" type="s" direction="in"/>
   <arg name="argv" type="as" direction="in"/>
   <arg name="spec" type="a{sv}" direction="in"/>
   <arg name="fds" type="a{sv}" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
   <arg name="id" type="s" direction="out"/>
   <arg name="sandbox" type="o" direction="out"/>
  </method>
  <method name="GetSandbox">
   <arg name="id" type="s" direction="in"/>
   <arg name="sandbox" type="o" direction="out"/>
  </method>
  <method name="ListSandboxes">
   <arg name="sandboxes" type="a(susso)" direction="out"/>
  </method>
  <method name="ListProfiles">
   <arg name="profiles" type="a(ss)" direction="out"/>
  </method>
  <signal name="SandboxNew">
   <arg name="id" type="s"/>
   <arg name="sandbox" type="o"/>
  </signal>
  <signal name="SandboxExited">
   <arg name="id" type="s"/>
   <arg name="sandbox" type="o"/>
   <arg name="result" type="s"/>
   <arg name="status" type="i"/>
  </signal>
  <signal name="SandboxRemoved">
   <arg name="id" type="s"/>
   <arg name="sandbox" type="o"/>
  </signal>
  <property name="Version" type="s" access="read">` + constAnn + `</property>
  <property name="Draining" type="b" access="read"/>
 </interface>
`

// sandboxXML is the Sandbox interface.
var sandboxXML = `<interface name="` + sodadapi.SandboxInterface + `">
  <method name="Kill">
   <arg name="signal" type="i" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
  </method>
  <method name="Grant">
   <arg name="target" type="s" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
  </method>
  <method name="Revoke">
   <arg name="target" type="s" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
  </method>
  <method name="ReadAudit">
   <arg name="cursor" type="t" direction="in"/>
   <arg name="max" type="u" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
   <arg name="records" type="as" direction="out"/>
   <arg name="next" type="t" direction="out"/>
  </method>
  <method name="Exec">
   <arg name="argv" type="as" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
   <arg name="fds" type="a{sv}" direction="in"/>
   <arg name="status" type="i" direction="out"/>
   <arg name="signal" type="s" direction="out"/>
   <arg name="timed_out" type="b" direction="out"/>
  </method>
  <method name="ExecEx">
   <arg name="argv" type="as" direction="in"/>
   <arg name="options" type="a{sv}" direction="in"/>
   <arg name="fds" type="a{sv}" direction="in"/>
   <arg name="status" type="a{sv}" direction="out"/>
  </method>
` + sandboxPropsXML() + ` </interface>
`

// Whether a Sandbox property changes: emits its new value, is const, or
// changes without a signal (read it when needed).
const (
	emits = iota
	isConst
	silent
)

// sandboxProps are the Sandbox properties in the reference's order, with
// their types and whether they change.
var sandboxProps = []struct {
	name, typ string
	changes   int
}{
	{"Id", "s", isConst}, {"OwnerUID", "u", isConst}, {"Profile", "s", isConst}, {"Unit", "s", isConst},
	{"CreatedTimestamp", "t", isConst}, {"State", "s", emits}, {"MCP", "as", emits}, {"Allow", "as", emits},
	{"AllowPrivate", "as", emits}, {"ReadWritePaths", "as", isConst}, {"ReadOnlyPaths", "as", isConst},
	{"NoNetwork", "b", isConst}, {"Keys", "as", isConst}, {"Image", "s", isConst}, {"ModelTokens", "a{st}", silent}, {"Limits", "a{st}", isConst},
	{"Result", "s", emits}, {"ExitStatus", "i", emits}, {"ExitedTimestamp", "t", emits},
}

func sandboxPropsXML() string {
	var b strings.Builder
	for _, p := range sandboxProps {
		switch p.changes {
		case emits:
			b.WriteString(`  <property name="` + p.name + `" type="` + p.typ + `" access="read"/>` + "\n")
		case isConst:
			b.WriteString(`  <property name="` + p.name + `" type="` + p.typ + `" access="read">` + constAnn + "</property>\n")
		default:
			b.WriteString(`  <property name="` + p.name + `" type="` + p.typ + `" access="read">` + silentAnn + "</property>\n")
		}
	}
	return b.String()
}

// standardXML are the standard interfaces every object has (Introspectable
// and Properties as godbus describes them, Peer as the bus implements it).
var standardXML = introspect.IntrospectDataString + `
 <interface name="org.freedesktop.DBus.Peer">
  <method name="Ping"/>
  <method name="GetMachineId">
   <arg name="machine_uuid" type="s" direction="out"/>
  </method>
 </interface>
` + prop.IntrospectDataString

// node writes one object's introspection: its interfaces and children.
func node(ifaces string, children []string) string {
	var b strings.Builder
	b.WriteString(introspect.IntrospectDeclarationString)
	b.WriteString("<node>\n")
	if ifaces != "" {
		b.WriteString(standardXML)
		b.WriteString(" " + ifaces)
	}
	sort.Strings(children)
	for _, c := range children {
		b.WriteString(` <node name="` + c + `"/>` + "\n")
	}
	b.WriteString("</node>\n")
	return b.String()
}

// introspector serves org.freedesktop.DBus.Introspectable from a function
// (the children change).
type introspector func() string

// Introspect implements org.freedesktop.DBus.Introspectable.
func (f introspector) Introspect() (string, *dbus.Error) { return f(), nil }
