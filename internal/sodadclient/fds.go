package sodadclient

import (
	"context"
	"encoding/xml"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// The fds argument of CreateSandbox is a{sh} in the API reference. godbus
// (v5.1.0 to v5.2.2) cannot receive an a{sh} that carries fds: its decoder
// makes the map's values UnixFDIndex and then stores UnixFD values in it,
// which fails, and the call is answered InvalidArgs (go.dbus issue #46:
// the index-to-fd replacement is only done at the top level). A sodad
// written with godbus can receive the same streams as an a{sv} whose
// values are variants holding an h. sodactl asks sodad's introspection
// which of the two it declares and sends that; a{sh} when it cannot tell,
// as the reference says.

// fdsArg returns fds in the form sodad's CreateSandbox declares.
func (c *Client) fdsArg(ctx context.Context, fds map[string]dbus.UnixFD) any {
	if c.createFDsSig(ctx) != "a{sv}" {
		return fds
	}
	v := make(map[string]dbus.Variant, len(fds))
	for k, fd := range fds {
		v[k] = dbus.MakeVariant(fd)
	}
	return v
}

// createFDsSig returns the signature of CreateSandbox's fds argument as
// sodad's introspection declares it, or "" if it cannot be read. It is
// read once per Client.
func (c *Client) createFDsSig(ctx context.Context) string {
	c.sigOnce.Do(func() {
		var data string
		if err := c.manager().CallWithContext(ctx, "org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&data); err != nil {
			return
		}
		var node introspect.Node
		if xml.Unmarshal([]byte(data), &node) != nil {
			return
		}
		for _, i := range node.Interfaces {
			if i.Name != ManagerInterface {
				continue
			}
			for _, m := range i.Methods {
				if m.Name != "CreateSandbox" {
					continue
				}
				var in []introspect.Arg
				for _, a := range m.Args {
					if a.Direction == "" || a.Direction == "in" {
						in = append(in, a)
					}
				}
				if len(in) == 5 {
					c.fdsSig = in[3].Type
				}
			}
		}
	})
	return c.fdsSig
}
