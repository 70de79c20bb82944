// Package polkit asks polkit whether a D-Bus caller may perform an action:
// the daemon side of org.freedesktop.PolicyKit1.Authority.CheckAuthorization.
//
// The subject is always the caller's unique bus name ("system-bus-name"),
// never a PID: polkitd then takes the caller's credentials from the bus
// itself, so a process that exits and whose PID is reused cannot be
// mistaken for the caller (the race of flatpak #6212 and polkit's
// deprecated unix-process subject).
//
// A daemon holds an Authorizer; Client is the real one over a
// *dbus.Conn to the system bus, and tests of the daemon substitute their
// own.
package polkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"
)

// D-Bus names of polkit's authority.
const (
	// BusName is polkitd's name on the system bus.
	BusName = "org.freedesktop.PolicyKit1"
	// ObjectPath is the authority's object.
	ObjectPath = dbus.ObjectPath("/org/freedesktop/PolicyKit1/Authority")
	// Interface is the authority's interface.
	Interface = "org.freedesktop.PolicyKit1.Authority"
)

// flagAllowUserInteraction is POLKIT_CHECK_AUTHORIZATION_FLAGS_ALLOW_USER_INTERACTION.
const flagAllowUserInteraction uint32 = 1

// Check is one authorization question.
type Check struct {
	// Sender is the caller's unique bus name (":1.42"), as the bus gave
	// it to the method (dbus.Sender); it must not come from arguments.
	Sender string
	// Action is the polkit action id.
	Action string
	// Details are shown in an authentication dialog and passed to rules
	// (action.lookup("key")), e.g. the sandbox id and profile. Keys
	// starting with "polkit." are polkit's own and refused.
	Details map[string]string
	// Interactive lets polkit ask the caller's authentication agent for a
	// password. Set it only when the caller asked for it (sodactl on a
	// terminal), so that a script never blocks on a prompt.
	Interactive bool
}

// Result is polkit's answer.
type Result struct {
	// Authorized says the caller may perform the action.
	Authorized bool
	// Challenge says the caller could be authorized after authenticating
	// (an interactive check would have asked): a caller that was refused
	// with Challenge set may retry with Interactive.
	Challenge bool
	// Details are polkit's details of the answer (e.g.
	// "polkit.dismissed" when the user closed the dialog).
	Details map[string]string
}

// Authorizer decides whether a caller may perform an action.
type Authorizer interface {
	// CheckAuthorization asks polkit about one caller and action. An
	// error means no answer (polkitd unreachable, malformed question,
	// context ended); it never means "no".
	CheckAuthorization(ctx context.Context, c Check) (Result, error)
}

// Client is an Authorizer that asks polkitd over D-Bus.
type Client struct {
	conn *dbus.Conn
}

// New returns a client using conn, a connection to the system bus (polkit
// answers on the system bus only). The connection stays the caller's.
func New(conn *dbus.Conn) *Client { return &Client{conn: conn} }

// subject is polkit's (sa{sv}) subject.
type subject struct {
	Kind    string
	Details map[string]dbus.Variant
}

// result is polkit's (bba{ss}) authorization result.
type result struct {
	IsAuthorized bool
	IsChallenge  bool
	Details      map[string]string
}

// maxDetails bounds the details of one check.
const maxDetails = 32

// validate checks a question before it goes to polkitd.
func (c *Check) validate() error {
	if c.Sender == "" || c.Sender[0] != ':' {
		return fmt.Errorf("polkit: sender %q is not a unique bus name", c.Sender)
	}
	if c.Action == "" {
		return errors.New("polkit: no action id")
	}
	if len(c.Details) > maxDetails {
		return fmt.Errorf("polkit: %d details, at most %d", len(c.Details), maxDetails)
	}
	for k := range c.Details {
		if len(k) >= 7 && k[:7] == "polkit." {
			return fmt.Errorf("polkit: detail %q: keys starting with polkit. are polkit's own", k)
		}
	}
	return nil
}

// CheckAuthorization implements Authorizer. When ctx ends before polkit
// answered (an authentication dialog still open, say), the check is
// cancelled in polkitd too (CancelCheckAuthorization), so no dialog stays
// behind.
func (cl *Client) CheckAuthorization(ctx context.Context, c Check) (Result, error) {
	if err := c.validate(); err != nil {
		return Result{}, err
	}
	details := c.Details
	if details == nil {
		details = map[string]string{}
	}
	var flags uint32
	if c.Interactive {
		flags = flagAllowUserInteraction
	}
	cancelID, err := newCancellationID()
	if err != nil {
		return Result{}, err
	}
	subj := subject{Kind: "system-bus-name", Details: map[string]dbus.Variant{"name": dbus.MakeVariant(c.Sender)}}
	obj := cl.conn.Object(BusName, ObjectPath)
	var r result
	call := obj.CallWithContext(ctx, Interface+".CheckAuthorization", 0, subj, c.Action, details, flags, cancelID)
	if call.Err != nil {
		if ctx.Err() != nil {
			cl.cancel(cancelID)
			return Result{}, fmt.Errorf("polkit: check %s for %s: %w", c.Action, c.Sender, ctx.Err())
		}
		return Result{}, fmt.Errorf("polkit: check %s for %s: %w", c.Action, c.Sender, call.Err)
	}
	if err := call.Store(&r); err != nil {
		return Result{}, fmt.Errorf("polkit: check %s for %s: reply: %w", c.Action, c.Sender, err)
	}
	return Result{Authorized: r.IsAuthorized, Challenge: r.IsChallenge, Details: r.Details}, nil
}

// cancel asks polkitd to drop a pending check; it is bounded on its own,
// as the caller's context has ended already.
func (cl *Client) cancel(id string) {
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	cl.conn.Object(BusName, ObjectPath).CallWithContext(ctx, Interface+".CancelCheckAuthorization", 0, id)
}

// newCancellationID returns an id unique to this connection's checks.
func newCancellationID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("polkit: cancellation id: %w", err)
	}
	return "soda-" + hex.EncodeToString(b[:]), nil
}
