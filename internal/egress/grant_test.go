package egress

import (
	"strings"
	"testing"
)

func TestParseGrant(t *testing.T) {
	tests := []struct {
		in      string
		want    Grant
		wantErr string
	}{
		{in: "example.com:443", want: Grant{Host: "example.com", Port: 443}},
		{in: "Example.COM:443", want: Grant{Host: "example.com", Port: 443}},
		{in: "example.com.:443", want: Grant{Host: "example.com", Port: 443}},
		{in: "*.example.com:443", want: Grant{Host: ".example.com", Port: 443}},
		{in: ".example.com:8443", want: Grant{Host: ".example.com", Port: 8443}},
		{in: "api-1.x.example.com:1", want: Grant{Host: "api-1.x.example.com", Port: 1}},
		{in: "localhost:65535", want: Grant{Host: "localhost", Port: 65535}},
		{in: "127.0.0.1:8080", want: Grant{Host: "127.0.0.1", Port: 8080}},
		{in: "93.184.216.34:443", want: Grant{Host: "93.184.216.34", Port: 443}},

		{in: "example.com", wantErr: "missing port"},
		{in: "example.com:", wantErr: "missing port"},
		{in: ":443", wantErr: "empty host"},
		{in: "example.com:0", wantErr: "out of range"},
		{in: "example.com:65536", wantErr: "out of range"},
		{in: "example.com:123456", wantErr: "out of range"},
		{in: "example.com:-1", wantErr: "not a decimal number"},
		{in: "example.com:+443", wantErr: "not a decimal number"},
		{in: "example.com:0x1bb", wantErr: "not a decimal number"},
		{in: "example.com:https", wantErr: "not a decimal number"},
		{in: "[::1]:443", wantErr: "IPv6 literals are not supported"},
		{in: "::1:443", wantErr: "bad character ':'"},
		{in: "exa_mple.com:443", wantErr: "bad character '_'"},
		{in: "user@example.com:443", wantErr: "bad character '@'"},
		{in: "example.com%25eth0:443", wantErr: "bad character '%'"},
		{in: "exa mple.com:443", wantErr: "bad character ' '"},
		{in: "*example.com:443", wantErr: "bad character '*'"},
		{in: "a.*.example.com:443", wantErr: "bad character '*'"},
		{in: "*:443", wantErr: "bad character '*'"},
		{in: "*.:443", wantErr: "empty host"},
		{in: "..example.com:443", wantErr: "leading dot"},
		{in: "example..com:443", wantErr: "empty label"},
		{in: "example.com..:443", wantErr: "empty label"},
		{in: "*.127.0.0.1:443", wantErr: "wildcard needs a domain name"},
		{in: "127.1:443", wantErr: "ambiguous IP literal"},
		{in: "0x7f000001:443", wantErr: "ambiguous IP literal"},
		{in: strings.Repeat("a", 64) + ".com:443", wantErr: "label longer than 63"},
		{in: strings.Repeat("a.", 127) + "com:443", wantErr: "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g, err := ParseGrant(tt.in, false)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseGrant(%q) = %+v, %v; want error containing %q", tt.in, g, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseGrant(%q): %v", tt.in, err)
			}
			if g != tt.want {
				t.Fatalf("ParseGrant(%q) = %+v, want %+v", tt.in, g, tt.want)
			}
		})
	}
	g, err := ParseGrant("127.0.0.1:80", true)
	if err != nil || !g.Private {
		t.Errorf("ParseGrant(private) = %+v, %v; want Private", g, err)
	}
}

func TestGrantString(t *testing.T) {
	for _, s := range []string{"example.com:443", "*.example.com:443", "10.0.0.1:22"} {
		g, err := ParseGrant(s, false)
		if err != nil {
			t.Fatal(err)
		}
		if g.String() != s {
			t.Errorf("ParseGrant(%q).String() = %q", s, g.String())
		}
	}
}

func TestPolicyAllows(t *testing.T) {
	pol := Policy{Allow: []Grant{
		{Host: "example.com", Port: 443},
		{Host: ".github.com", Port: 443},
		{Host: "internal.github.com", Port: 443, Private: true},
		{Host: "127.0.0.1", Port: 8080, Private: true},
		{Host: "93.184.216.34", Port: 443},
		{Host: ".0.1", Port: 443}, // malformed by hand; must not match IPs
	}}
	tests := []struct {
		host        string
		port        uint16
		ok, private bool
	}{
		{"example.com", 443, true, false},
		{"example.com", 80, false, false},
		{"www.example.com", 443, false, false},
		{"notexample.com", 443, false, false},
		{"example.com.evil.org", 443, false, false},
		{"github.com", 443, true, false},
		{"api.github.com", 443, true, false},
		{"a.b.github.com", 443, true, false},
		{"internal.github.com", 443, true, true},
		{"evilgithub.com", 443, false, false},
		{"github.com.evil.org", 443, false, false},
		{"127.0.0.1", 8080, true, true},
		{"127.0.0.1", 443, false, false},
		{"93.184.216.34", 443, true, false},
		{"10.0.0.1", 443, false, false},
	}
	for _, tt := range tests {
		_, ip, err := normalizeHost(tt.host)
		if err != nil {
			t.Fatalf("normalizeHost(%q): %v", tt.host, err)
		}
		ok, private := pol.allows(tt.host, ip.IsValid(), tt.port)
		if ok != tt.ok || private != tt.private {
			t.Errorf("allows(%s:%d) = %v, %v; want %v, %v", tt.host, tt.port, ok, private, tt.ok, tt.private)
		}
	}
}

func TestPolicyPorts(t *testing.T) {
	pol := Policy{MCPPorts: []uint16{7000, DefaultProxyPort}}
	if pol.proxyPort() != DefaultProxyPort {
		t.Errorf("proxyPort() = %d, want %d", pol.proxyPort(), DefaultProxyPort)
	}
	if !pol.isMCPPort(7000) || pol.isMCPPort(7001) {
		t.Error("isMCPPort wrong for 7000/7001")
	}
	if pol.isMCPPort(DefaultProxyPort) {
		t.Error("the proxy port must win over an MCP port")
	}
}
