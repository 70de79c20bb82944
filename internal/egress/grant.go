package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Grant allows CONNECT to one host (or a family of hosts) at one port.
type Grant struct {
	// Host is an exact lower-case host name, ".suffix" for suffix and
	// all its subdomains, or a canonical dotted-quad IPv4 literal. Build
	// grants with ParseGrant, which normalises and checks it.
	Host string
	// Port is the only port the grant allows.
	Port uint16
	// Private lets the grant reach loopback, private and other reserved
	// addresses (see CheckAddr), which are refused otherwise. The user
	// asks for it explicitly (--allow-private).
	Private bool
}

// String returns the grant in the form ParseGrant accepts, with a
// ".suffix" host written as "*.suffix".
func (g Grant) String() string {
	host := g.Host
	if strings.HasPrefix(host, ".") {
		host = "*" + host
	}
	return fmt.Sprintf("%s:%d", host, g.Port)
}

// ParseGrant parses "host:port". host is a DNS name (letters, digits, dots
// and hyphens; case and one trailing dot do not matter), a canonical
// dotted-quad IPv4 literal, or "*.suffix" (also written ".suffix") to allow
// suffix and all its subdomains. port is decimal, 1 to 65535. IPv6
// literals are not supported. private is stored as Grant.Private.
func ParseGrant(s string, private bool) (Grant, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Grant{}, fmt.Errorf("grant %q: missing port (want host:port)", s)
	}
	hostPart, portPart := s[:i], s[i+1:]
	if strings.ContainsAny(hostPart, "[]") {
		return Grant{}, fmt.Errorf("grant %q: IPv6 literals are not supported", s)
	}
	port, err := parsePort(portPart)
	if err != nil {
		return Grant{}, fmt.Errorf("grant %q: %w", s, err)
	}
	suffix := false
	switch {
	case strings.HasPrefix(hostPart, "*."):
		suffix, hostPart = true, hostPart[2:]
	case strings.HasPrefix(hostPart, "."):
		suffix, hostPart = true, hostPart[1:]
	}
	host, ip, err := normalizeHost(hostPart)
	if err != nil {
		return Grant{}, fmt.Errorf("grant %q: host: %w", s, err)
	}
	if suffix {
		if ip.IsValid() {
			return Grant{}, fmt.Errorf("grant %q: a wildcard needs a domain name, not an IP address", s)
		}
		host = "." + host
	}
	return Grant{Host: host, Port: port, Private: private}, nil
}

// parsePort parses a decimal port number, 1 to 65535.
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, errors.New("missing port")
	}
	if len(s) > 5 {
		return 0, fmt.Errorf("port %.16q out of range", s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q is not a decimal number", s)
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s out of range 1-65535", s)
	}
	return uint16(n), nil
}

// normalizeHost checks a host name or IPv4 literal and returns it in lower
// case without a trailing dot. ip is valid when host is a canonical
// dotted-quad IPv4 literal. Any other host whose last label is numeric
// (127.1, 2130706433, 0x7f000001, 0177.0.0.1, 1.2.3.4.5) is refused: C
// libraries and browsers read such names as IPv4 addresses in ways that
// differ, so they cannot be matched against a grant safely.
func normalizeHost(s string) (host string, ip netip.Addr, err error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return "", netip.Addr{}, fmt.Errorf("bad character %q", c)
		}
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", netip.Addr{}, errors.New("empty host")
	}
	if len(s) > 253 {
		return "", netip.Addr{}, errors.New("host name longer than 253 bytes")
	}
	s = strings.ToLower(s)
	if s[0] == '.' {
		return "", netip.Addr{}, errors.New("leading dot")
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return "", netip.Addr{}, errors.New("empty label")
		}
		if len(l) > 63 {
			return "", netip.Addr{}, errors.New("label longer than 63 bytes")
		}
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() && a.String() == s {
		return s, a, nil
	}
	if numericLabel(labels[len(labels)-1]) {
		return "", netip.Addr{}, errors.New("ambiguous IP literal")
	}
	return s, netip.Addr{}, nil
}

// numericLabel reports whether l reads as a number to inet_aton or the
// WHATWG URL parser: all decimal digits, or 0x followed by hex digits.
func numericLabel(l string) bool {
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// Policy is what the sandbox may reach.
type Policy struct {
	// Allow lists the CONNECT targets.
	Allow []Grant
	// MCPPorts are the ports of granted host-side MCP servers. A
	// connection accepted on such a port inside the sandbox is connected
	// straight to 127.0.0.1:port on the host, without CONNECT. This is the
	// only way to reach host loopback without a Private grant.
	MCPPorts []uint16
	// ProxyPort is the port of the in-sandbox CONNECT proxy listener;
	// connections accepted on it speak CONNECT. Zero means
	// DefaultProxyPort.
	ProxyPort uint16
}

// DefaultProxyPort is the port of the in-sandbox CONNECT proxy when
// Policy.ProxyPort is zero.
const DefaultProxyPort = 18080

// allows reports whether a grant covers the normalised host and port, and
// whether any grant that covers them is Private. An IP literal host is
// matched only by a grant for that exact address.
func (pol *Policy) allows(host string, isIP bool, port uint16) (ok, private bool) {
	for _, g := range pol.Allow {
		if g.Port != port {
			continue
		}
		match := g.Host == host
		if !match && !isIP && strings.HasPrefix(g.Host, ".") {
			match = host == g.Host[1:] || strings.HasSuffix(host, g.Host)
		}
		if match {
			ok = true
			private = private || g.Private
		}
	}
	return ok, private
}

// Covers reports whether a grant of pol covers target, an exact
// normalised host:port (ParseExactTarget).
func (pol *Policy) Covers(target string) bool {
	g, err := ParseGrant(target, false)
	if err != nil {
		return false
	}
	_, ip, _ := normalizeHost(g.Host)
	ok, _ := pol.allows(g.Host, ip.IsValid(), g.Port)
	return ok
}

// proxyPort returns ProxyPort or its default.
func (pol *Policy) proxyPort() uint16 {
	if pol.ProxyPort == 0 {
		return DefaultProxyPort
	}
	return pol.ProxyPort
}

// isMCPPort reports whether port is an MCP port and not the proxy port.
func (pol *Policy) isMCPPort(port uint16) bool {
	if port == pol.proxyPort() {
		return false
	}
	for _, p := range pol.MCPPorts {
		if p == port {
			return true
		}
	}
	return false
}
