package sodad

import (
	"context"
	"fmt"
	"os/user"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/polkit"
)

// caller is who sent a method call, as the bus says.
type caller struct {
	// Sender is the unique bus name (":1.42").
	Sender string
	UID    uint32
	GIDs   []uint32
}

// Peers tells who a bus connection is.
type Peers interface {
	// Credentials returns the uid and groups of the connection sender.
	Credentials(ctx context.Context, sender string) (uid uint32, gids []uint32, err error)
}

// busPeers asks the bus daemon (GetConnectionCredentials), falling back to
// the user database for the groups when the bus does not report them.
type busPeers struct{ conn *dbus.Conn }

// Credentials implements Peers.
func (b busPeers) Credentials(ctx context.Context, sender string) (uint32, []uint32, error) {
	var creds map[string]dbus.Variant
	err := b.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, sender).Store(&creds)
	if err != nil {
		return 0, nil, fmt.Errorf("GetConnectionCredentials %s: %w", sender, err)
	}
	// A ProcessFD the bus may add (dbus-broker) is not used: the uid is the
	// identity; close it so that it does not leak.
	if v, ok := creds["ProcessFD"]; ok {
		if fd, ok := v.Value().(dbus.UnixFD); ok {
			closeFd(int(fd))
		}
	}
	v, ok := creds["UnixUserID"]
	if !ok {
		return 0, nil, fmt.Errorf("GetConnectionCredentials %s: no UnixUserID", sender)
	}
	uid, ok := v.Value().(uint32)
	if !ok {
		return 0, nil, fmt.Errorf("GetConnectionCredentials %s: UnixUserID is %s", sender, v.Signature())
	}
	if v, ok := creds["UnixGroupIDs"]; ok {
		if g, ok := v.Value().([]uint32); ok {
			return uid, g, nil
		}
	}
	return uid, userGroups(uid), nil
}

// userGroups are the groups of uid in the user database (none when it is
// not there).
func userGroups(uid uint32) []uint32 {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil
	}
	var out []uint32
	for _, s := range ids {
		if n, err := strconv.ParseUint(s, 10, 32); err == nil {
			out = append(out, uint32(n))
		}
	}
	return out
}

// authz asks polkit, the one place every method's authorization goes
// through.
type authz struct {
	auth polkit.Authorizer
	// observe, when set, gets each check's duration (figures, tests).
	observe func(action string, d time.Duration)
}

// check asks polkit about action for c. A refusal is an error:
// InteractiveAuthorizationRequired when authenticating would help and the
// caller did not allow interaction, refused otherwise (AccessDenied when
// refused is nil).
func (a authz) check(ctx context.Context, c caller, action string, details map[string]string, interactive bool, refused error) error {
	start := time.Now()
	r, err := a.auth.CheckAuthorization(ctx, polkit.Check{Sender: c.Sender, Action: action, Details: details, Interactive: interactive})
	if a.observe != nil {
		a.observe(action, time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("polkit %s: %w", action, err)
	}
	if r.Authorized {
		return nil
	}
	if r.Challenge && !interactive {
		return errorf(errInteractiveAuth, "%s needs authentication: retry with option interactive", action)
	}
	if refused == nil {
		refused = errorf(errAccessDenied, "polkit refused %s", action)
	}
	return refused
}

// allowed asks without interaction and only says yes or no (ListSandboxes,
// visibility).
func (a authz) allowed(ctx context.Context, c caller, action string, details map[string]string) bool {
	return a.check(ctx, c, action, details, false, nil) == nil
}

// owned decides op on a sandbox of owner's: its owner needs op.own
// (nothing if ""), anyone else op.other.
func (a authz) owned(ctx context.Context, c caller, owner uint32, op operation, details map[string]string, interactive bool) error {
	action := op.own
	if c.UID != owner {
		action = op.other
	}
	if action == "" {
		return nil
	}
	return a.check(ctx, c, action, details, interactive, nil)
}
