package sodad

import (
	"reflect"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// createFdsArg and execFdsArg are the index of CreateSandbox's and
// Sandbox.Exec's (and ExecEx's) fds in their bodies.
const (
	createFdsArg = 3
	execFdsArg   = 2
)

// closeStrayFds is the connection's incoming interceptor: a method call
// may carry Unix fds anywhere a variant or an h fits, and godbus hands
// them to no one unless the method takes them, so each would stay open in
// sodad for good (a caller could exhaust sodad's descriptors). It closes
// every fd of an incoming method call except those in CreateSandbox's and
// Sandbox.Exec's (ExecEx's) fds argument, which those methods own and close. Replies (the bus's
// ProcessFD) are left to their callers.
//
// It cannot help with a body godbus failed to decode (an a{sh} holding
// fds): godbus drops the body and its fds with it.
func closeStrayFds(msg *dbus.Message) { strayFdCloser(nil)(msg) }

// strayFdCloser is closeStrayFds keeping Exec's fds only for a call to a
// sandbox that isSandbox says exists (nil: none does): godbus answers a
// call to an object that is not there without anyone taking its fds.
func strayFdCloser(isSandbox func(dbus.ObjectPath) bool) func(*dbus.Message) {
	return func(msg *dbus.Message) { closeStray(msg, isSandbox) }
}

func closeStray(msg *dbus.Message, isSandbox func(dbus.ObjectPath) bool) {
	if msg.Type != dbus.TypeMethodCall {
		return
	}
	keep := -1
	iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	switch {
	case path == sodadapi.ManagerPath && member == "CreateSandbox" && (iface == sodadapi.ManagerInterface || iface == ""):
		keep = createFdsArg
	case (member == "Exec" || member == "ExecEx") && (iface == sodadapi.SandboxInterface || iface == "") && isSandbox != nil && isSandbox(path):
		keep = execFdsArg
	}
	for i, v := range msg.Body {
		if i != keep {
			closeFdsIn(reflect.ValueOf(v))
		}
	}
}

var unixFDType = reflect.TypeOf(dbus.UnixFD(0))

// closeFdsIn closes every dbus.UnixFD inside v.
func closeFdsIn(v reflect.Value) {
	if !v.IsValid() {
		return
	}
	if v.Type() == unixFDType {
		closeFd(int(v.Int()))
		return
	}
	if vr, ok := v.Interface().(dbus.Variant); ok {
		closeFdsIn(reflect.ValueOf(vr.Value()))
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		closeFdsIn(v.Elem())
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			closeFdsIn(v.Index(i))
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			closeFdsIn(it.Value())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				closeFdsIn(v.Field(i))
			}
		}
	}
}
