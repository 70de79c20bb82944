package sodadclient

import "github.com/godbus/dbus/v5"

// The fds argument of CreateSandbox is a{sv}, each value a variant holding
// an h (docs/dbus-api.md). It is not a{sh}: godbus (v5.1.0 to v5.2.2)
// cannot receive an a{sh} that carries fds (its decoder replaces fd
// indices by fds only at the top level, go.dbus issue #46), so sodad,
// written with godbus, declares a{sv}.

// fdsArg returns fds in the form CreateSandbox takes.
func fdsArg(fds map[string]dbus.UnixFD) map[string]dbus.Variant {
	v := make(map[string]dbus.Variant, len(fds))
	for k, fd := range fds {
		v[k] = dbus.MakeVariant(fd)
	}
	return v
}
