package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/soda-project/soda/internal/egress"
)

// SetEgress changes what the running sandbox may reach through its CONNECT
// proxy: the grants in add are allowed and those in remove taken away, in
// one step (if one of them cannot be applied, a grant already there or a
// revoke of one that is not, nothing changes). by says who asked; it is on
// the audit trail, which gets one "grant" or "revoke" record per grant.
//
// The change applies to the connections made from then on: a connection
// already open stays open until it ends, even if its grant is revoked.
// MCP ports cannot change (the relay in the sandbox listens on the ones it
// started with). A sandbox with no network (Spec.NoNetwork) has no proxy
// to change, and one that has ended none any more: SetEgress fails.
func (sb *Sandbox) SetEgress(ctx context.Context, by string, add, remove []egress.Grant) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if sb.proxy == nil {
		return errors.New("sandbox egress: the sandbox has no network (closed mode)")
	}
	select {
	case <-sb.proxyDone:
		return errors.New("sandbox egress: the sandbox has ended")
	default:
	}
	if len(add)+len(remove) == 0 {
		return nil
	}
	pol, err := sb.proxy.ChangeGrants(add, remove)
	if err != nil {
		return fmt.Errorf("sandbox egress: %w", err)
	}
	now := fmt.Sprintf("grants now: %v", grantStrings(pol))
	for _, g := range remove {
		sb.record(Record{Event: "revoke", Grants: grantStrings(egress.Policy{Allow: []egress.Grant{g}}), By: by, Detail: now})
	}
	for _, g := range add {
		sb.record(Record{Event: "grant", Grants: grantStrings(egress.Policy{Allow: []egress.Grant{g}}), By: by, Detail: now})
	}
	sb.log.Info("sandbox egress changed", "by", by, "added", len(add), "removed", len(remove), "grants", grantStrings(pol))
	return nil
}
