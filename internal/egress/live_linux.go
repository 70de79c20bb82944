package egress

import (
	"fmt"
	"slices"
)

// policy returns the policy in force: the last one set by SetPolicy or
// ChangeGrants, or the Policy field if none was. Each connection reads it
// once, when it is served: a change applies to the connections that come
// after it, and those already open are not cut.
func (p *Proxy) policy() *Policy {
	if cur := p.cur.Load(); cur != nil {
		return cur
	}
	return &p.Policy
}

// CurrentPolicy returns a copy of the policy in force.
func (p *Proxy) CurrentPolicy() Policy { return p.policy().clone() }

// SetPolicy replaces the policy in force, for the connections served from
// now on; connections already open are not cut. It is safe to call while
// the proxy serves. pol is copied. The relay inside the sandbox listens
// on the ports it was started with: a port added to MCPPorts or a new
// ProxyPort is only reached if the relay listens there.
func (p *Proxy) SetPolicy(pol Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := pol.clone()
	p.cur.Store(&c)
}

// ChangeGrants adds the grants in add to Policy.Allow and takes those in
// remove out of it, atomically, for the connections served from now on
// (connections already open are not cut). A grant is matched by host,
// port and Private. Adding a grant already there or removing one that is
// not is an error, and then nothing changes. It returns the new policy.
func (p *Proxy) ChangeGrants(add, remove []Grant) (Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := p.policy().clone()
	for _, g := range remove {
		i := slices.Index(next.Allow, g)
		if i < 0 {
			return Policy{}, fmt.Errorf("revoke %s: not granted", g)
		}
		next.Allow = slices.Delete(next.Allow, i, i+1)
	}
	for _, g := range add {
		if g.Port == 0 || g.Host == "" {
			return Policy{}, fmt.Errorf("grant %q: empty host or port", g)
		}
		if slices.Contains(next.Allow, g) {
			return Policy{}, fmt.Errorf("grant %s: already granted", g)
		}
		next.Allow = append(next.Allow, g)
	}
	p.cur.Store(&next)
	return next.clone(), nil
}

// clone returns a deep copy of pol: a stored policy is never changed.
func (pol *Policy) clone() Policy {
	c := *pol
	c.Allow = slices.Clone(pol.Allow)
	c.MCPPorts = slices.Clone(pol.MCPPorts)
	return c
}
