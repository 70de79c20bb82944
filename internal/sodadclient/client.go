// Package sodadclient is the client side of sodad's D-Bus API
// (io.github.soda_project.Soda1, docs/dbus-api.md): it finds sodad on the
// system bus, creates sandboxes there with the caller's standard streams
// or a pty passed as Unix fds, waits for their exit status, forwards
// signals, changes their allow-lists and reads their audit. sodactl run
// and sodactl sandbox are built on it.
//
// Errors from sodad keep their D-Bus error name (Error.Name), match the
// sentinel of that name (errors.Is(err, ErrNoSuchSandbox)) and say what to
// do about them (Error.Error). The caller's identity is never sent: sodad
// takes it from the bus.
package sodadclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// Client talks to sodad over one bus connection.
type Client struct {
	conn  *dbus.Conn
	owned bool // Close closes conn
	// RestartWait is how long Sandbox.Wait waits for a successor when
	// sodad leaves the bus before the sandbox exited (0: DefaultRestartWait).
	RestartWait time.Duration
}

// Connect connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS, else the
// standard socket). It does not check that sodad is there: see Available.
// The connection lives until Close or until ctx is done.
func Connect(ctx context.Context) (*Client, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	return &Client{conn: conn, owned: true}, nil
}

// New returns a Client on conn, which the caller keeps and closes.
func New(conn *dbus.Conn) *Client { return &Client{conn: conn} }

// Close closes the bus connection if Connect opened it.
func (c *Client) Close() error {
	if c.owned {
		return c.conn.Close()
	}
	return nil
}

// Available reports whether sodad is on the bus: its name has an owner, or
// the bus can start it (activatable, as the packaged sodad.service is).
func (c *Client) Available(ctx context.Context) (bool, error) {
	bus := c.conn.BusObject()
	var owned bool
	if err := bus.CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, sodadapi.BusName).Store(&owned); err != nil {
		return false, fmt.Errorf("ask the bus whether %s has an owner: %w", sodadapi.BusName, err)
	}
	if owned {
		return true, nil
	}
	var names []string
	if err := bus.CallWithContext(ctx, "org.freedesktop.DBus.ListActivatableNames", 0).Store(&names); err != nil {
		return false, fmt.Errorf("list the bus's activatable names: %w", err)
	}
	return slices.Contains(names, sodadapi.BusName), nil
}

// Detect connects to the system bus and reports whether sodad is on it,
// giving up after timeout (a bus that does not answer). No system bus is
// an error with a nil Client; otherwise the Client is returned whether
// sodad is there or not, for the caller to close. The connection lives
// until Close or until ctx is done.
func Detect(ctx context.Context, timeout time.Duration) (*Client, bool, error) {
	type result struct {
		c   *Client
		ok  bool
		err error
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		c, err := Connect(ctx)
		if err != nil {
			done <- result{err: err}
			return
		}
		ok, err := c.Available(tctx)
		if err != nil {
			c.Close()
			c = nil
		}
		done <- result{c, ok, err}
	}()
	select {
	case r := <-done:
		return r.c, r.ok, r.err
	case <-tctx.Done():
		go func() { // the bus may still answer: let go of it then
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, false, fmt.Errorf("look for sodad on the system bus: no answer within %s", timeout)
	}
}

func (c *Client) manager() dbus.BusObject {
	return c.conn.Object(sodadapi.BusName, sodadapi.ManagerPath)
}

// Entry is one sandbox as ListSandboxes reports it.
type Entry struct {
	ID       string          `json:"id"`
	OwnerUID uint32          `json:"owner_uid"`
	Profile  string          `json:"profile"`
	State    string          `json:"state"`
	Path     dbus.ObjectPath `json:"path"`
}

// List returns the sandboxes the caller may see.
func (c *Client) List(ctx context.Context) ([]Entry, error) {
	var rows []sodadapi.SandboxEntry
	if err := c.manager().CallWithContext(ctx, sodadapi.ManagerInterface+".ListSandboxes", 0).Store(&rows); err != nil {
		return nil, wrap("list sandboxes", err)
	}
	out := make([]Entry, 0, len(rows))
	for _, r := range rows {
		out = append(out, Entry{r.ID, r.Owner, r.Profile, r.State, r.Path})
	}
	return out, nil
}

// Profile is a profile the caller may create sandboxes from.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// ListProfiles returns the profiles whose Users=/Groups= include the caller.
func (c *Client) ListProfiles(ctx context.Context) ([]Profile, error) {
	var rows []sodadapi.ProfileEntry
	if err := c.manager().CallWithContext(ctx, sodadapi.ManagerInterface+".ListProfiles", 0).Store(&rows); err != nil {
		return nil, wrap("list profiles", err)
	}
	out := make([]Profile, 0, len(rows))
	for _, r := range rows {
		out = append(out, Profile{r.Name, r.Description})
	}
	return out, nil
}

// Open returns the sandbox id, if the caller may see it.
func (c *Client) Open(ctx context.Context, id string) (*Sandbox, error) {
	var path dbus.ObjectPath
	if err := c.manager().CallWithContext(ctx, sodadapi.ManagerInterface+".GetSandbox", 0, id).Store(&path); err != nil {
		return nil, wrap("look up sandbox "+id, err)
	}
	return &Sandbox{c: c, ID: id, Path: path}, nil
}

// Version returns sodad's version (the Manager's Version property).
func (c *Client) Version(ctx context.Context) (string, error) {
	v, err := c.manager().GetProperty(sodadapi.ManagerInterface + ".Version")
	if err != nil {
		return "", wrap("read sodad's version", err)
	}
	s, _ := v.Value().(string)
	return s, nil
}

// options is the trailing a{sv} of every method that acts.
func options(interactive bool) map[string]dbus.Variant {
	o := map[string]dbus.Variant{}
	if interactive {
		o["interactive"] = dbus.MakeVariant(true)
	}
	return o
}

// errNoExit is returned by Wait when sodad left the bus before the
// sandbox's exit was seen.
var errNoExit = errors.New("sodad left the bus before the sandbox's exit status came back")
