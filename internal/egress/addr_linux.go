package egress

import (
	"fmt"
	"net/netip"
)

// addrRange is a block of addresses that a sandboxed program must not reach
// through the proxy, with a word for what it is.
type addrRange struct {
	prefix netip.Prefix
	kind   string
}

// unsafeV4 returns the reserved IPv4 block that holds a, if any.
func unsafeV4(a netip.Addr) (addrRange, bool) {
	ranges := [...]addrRange{
		{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
		{netip.MustParsePrefix("10.0.0.0/8"), "private"},
		{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
		{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
		{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
		{netip.MustParsePrefix("172.16.0.0/12"), "private"},
		{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
		{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
		{netip.MustParsePrefix("192.168.0.0/16"), "private"},
		{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
		{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
		{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
		{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
		{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	}
	for _, r := range ranges {
		if r.prefix.Contains(a) {
			return r, true
		}
	}
	return addrRange{}, false
}

// unsafeV6 returns the reserved IPv6 block that holds a, if any. Blocks
// that embed an IPv4 address are not in it: see embeddedV4.
func unsafeV6(a netip.Addr) (addrRange, bool) {
	ranges := [...]addrRange{
		{netip.MustParsePrefix("::/128"), "unspecified"},
		{netip.MustParsePrefix("::1/128"), "loopback"},
		{netip.MustParsePrefix("fe80::/10"), "link-local"},
		{netip.MustParsePrefix("fec0::/10"), "site-local"},
		{netip.MustParsePrefix("fc00::/7"), "unique-local"},
		{netip.MustParsePrefix("ff00::/8"), "multicast"},
		{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	}
	for _, r := range ranges {
		if r.prefix.Contains(a) {
			return r, true
		}
	}
	return addrRange{}, false
}

// embeddedV4 returns the IPv4 address that the IPv6 address a carries, for
// the forms through which a packet may end up at that IPv4 address:
// IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96), NAT64 (64:ff9b::/96),
// 6to4 (2002::/16, bytes 2..5) and Teredo (2001::/32, the client address in
// the last four bytes, inverted). The string names the form.
func embeddedV4(a netip.Addr) (netip.Addr, string, bool) {
	b := a.As16()
	last4 := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case a.Is4In6():
		return last4, "IPv4-mapped", true
	case netip.MustParsePrefix("::/96").Contains(a):
		return last4, "IPv4-compatible", true
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
		return last4, "NAT64", true
	case netip.MustParsePrefix("2002::/16").Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	case netip.MustParsePrefix("2001::/32").Contains(a):
		return netip.AddrFrom4([4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}), "Teredo", true
	}
	return netip.Addr{}, "", false
}

// CheckAddr reports whether a is an address that a sandboxed program may
// reach through the proxy without a Private grant. It returns an error
// naming the address and the reserved block it is in for loopback,
// private, link-local, shared, documentation, benchmarking, multicast,
// reserved and unspecified addresses, IPv4 and IPv6 alike. IPv6 addresses
// that embed an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4,
// Teredo) are unwrapped and the embedded address is checked too. A zone is
// ignored.
func CheckAddr(a netip.Addr) error {
	if !a.IsValid() {
		return fmt.Errorf("invalid address")
	}
	a = a.WithZone("")
	if a.Is4() {
		if r, bad := unsafeV4(a); bad {
			return fmt.Errorf("%s address %s (in %s)", r.kind, a, r.prefix)
		}
		return nil
	}
	if r, bad := unsafeV6(a); bad {
		return fmt.Errorf("%s address %s (in %s)", r.kind, a, r.prefix)
	}
	if v4, form, ok := embeddedV4(a); ok {
		if r, bad := unsafeV4(v4); bad {
			return fmt.Errorf("%s address %s (%s, embeds %s in %s)", r.kind, a, form, v4, r.prefix)
		}
	}
	return nil
}
