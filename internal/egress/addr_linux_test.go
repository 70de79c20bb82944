package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr string
		want string // substring of the error; "" means safe
	}{
		// Public addresses.
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.0.1.1", ""},
		{"192.169.0.1", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"2001:db9::1", ""},
		{"::ffff:93.184.216.34", ""},
		{"64:ff9b::5db8:d822", ""},                     // NAT64 of 93.184.216.34
		{"2002:5db8:d822::1", ""},                      // 6to4 of 93.184.216.34
		{"2001:0:4136:e378:8000:63bf:a247:27dd", ""},   // Teredo, client 93.184.216.34
		{"::5db8:d822", ""},                            // IPv4-compatible 93.184.216.34
		{"fe80::1%eth0", "link-local address fe80::1"}, // zone ignored, still link-local

		// IPv4 reserved blocks.
		{"0.0.0.0", "this-network address 0.0.0.0"},
		{"0.0.0.1", "this-network address 0.0.0.1"},
		{"10.0.0.1", "private address 10.0.0.1"},
		{"10.255.255.255", "private"},
		{"100.64.1.1", "shared (carrier-grade NAT) address 100.64.1.1"},
		{"100.127.255.255", "shared"},
		{"127.0.0.1", "loopback address 127.0.0.1"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local address 169.254.169.254"},
		{"172.16.0.1", "private address 172.16.0.1"},
		{"172.31.255.255", "private"},
		{"192.0.0.8", "IETF protocol assignment"},
		{"192.0.2.1", "documentation address 192.0.2.1"},
		{"192.168.1.1", "private address 192.168.1.1"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},

		// IPv6 reserved blocks.
		{"::", "unspecified address ::"},
		{"::1", "loopback address ::1"},
		{"fe80::1", "link-local address fe80::1"},
		{"febf::1", "link-local"},
		{"fec0::1", "site-local"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"ff02::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"64:ff9b:1::1", "local-use NAT64"},

		// IPv6 forms that embed a reserved IPv4 address.
		{"::ffff:127.0.0.1", "embeds 127.0.0.1"},
		{"::ffff:10.0.0.1", "IPv4-mapped, embeds 10.0.0.1"},
		{"::ffff:169.254.169.254", "embeds 169.254.169.254"},
		{"::127.0.0.1", "IPv4-compatible, embeds 127.0.0.1"},
		{"::10.0.0.1", "embeds 10.0.0.1"},
		{"::0.0.0.2", "embeds 0.0.0.2"},
		{"64:ff9b::a9fe:a9fe", "NAT64, embeds 169.254.169.254"},
		{"64:ff9b::7f00:1", "embeds 127.0.0.1"},
		{"64:ff9b::10.1.2.3", "embeds 10.1.2.3"},
		{"2002:7f00:1::", "6to4, embeds 127.0.0.1"},
		{"2002:a9fe:a9fe::1", "embeds 169.254.169.254"},
		{"2002:c0a8:101:1::1", "embeds 192.168.1.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo, embeds 127.0.0.1"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "embeds 192.0.2.45"}, // RFC 4380 example
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", "embeds 10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := CheckAddr(netip.MustParseAddr(tt.addr))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckAddr(%s) = %v, want nil", tt.addr, err)
			case tt.want != "" && err == nil:
				t.Fatalf("CheckAddr(%s) = nil, want error containing %q", tt.addr, tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("CheckAddr(%s) = %q, want it to contain %q", tt.addr, err, tt.want)
			}
		})
	}
	if err := CheckAddr(netip.Addr{}); err == nil {
		t.Error("CheckAddr(zero Addr) = nil, want error")
	}
}

func TestCheckCandidatePrivate(t *testing.T) {
	tests := []struct {
		addr    string
		private bool
		ok      bool
	}{
		{"127.0.0.1", false, false},
		{"127.0.0.1", true, true},
		{"10.0.0.1", true, true},
		{"::ffff:127.0.0.1", true, true},
		{"::1", true, true},
		{"0.0.0.0", true, false},
		{"::", true, false},
		{"224.0.0.1", true, false},
		{"255.255.255.255", true, false},
		{"93.184.216.34", false, true},
		// the host's own addresses, whatever their range
		{"1.2.3.4", false, false},
		{"::ffff:1.2.3.4", false, false},
		{"1.2.3.4", true, true},
	}
	local := fakeLocal{netip.MustParseAddr("1.2.3.4"): "lo"}
	for _, tt := range tests {
		err := checkCandidate(netip.MustParseAddr(tt.addr), tt.private, local)
		if (err == nil) != tt.ok {
			t.Errorf("checkCandidate(%s, private=%v) = %v, want ok=%v", tt.addr, tt.private, err, tt.ok)
		}
	}
}

// fakeLocal is a fixed set of host addresses.
type fakeLocal map[netip.Addr]string

func (f fakeLocal) Local(a netip.Addr) (string, bool) {
	iface, ok := f[a.Unmap().WithZone("")]
	return iface, ok
}
