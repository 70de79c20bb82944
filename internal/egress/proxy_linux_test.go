package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxyEnv serves a Proxy over Unix socketpairs, with a fake resolver and
// a Dial that sends every non-loopback address to an echo server.
type proxyEnv struct {
	p      *Proxy
	res    *fakeResolver
	rec    *recorder
	echo   string // echo server address
	mu     sync.Mutex
	dialed []string // addresses Dial was asked for
	wg     sync.WaitGroup
	ctx    context.Context
}

const testProxyPort = 18080

func newProxyEnv(t *testing.T, pol Policy, names map[string][]netip.Addr) *proxyEnv {
	t.Helper()
	e := &proxyEnv{res: &fakeResolver{names: names}, rec: newRecorder(), echo: echoServer(t)}
	ctx, cancel := context.WithCancel(context.Background())
	e.ctx = ctx
	t.Cleanup(func() { cancel(); e.wg.Wait() })
	e.p = &Proxy{
		Policy:           pol,
		Resolver:         e.res,
		Audit:            e.rec.audit,
		Log:              testLogger(t),
		HandshakeTimeout: 5 * time.Second,
		ConnectTimeout:   5 * time.Second,
		Dial:             e.dial,
	}
	return e
}

// dial records addr; a loopback address is dialled as is (so that
// Private grants reach real listeners), any other goes to the echo server,
// except 93.184.216.35 which is down.
func (e *proxyEnv) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e.mu.Lock()
	e.dialed = append(e.dialed, addr)
	e.mu.Unlock()
	if network != "tcp" {
		return nil, fmt.Errorf("test dial: network %q", network)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("test dial: %q is not a validated IP:port: %w", addr, err)
	}
	if ap.Addr() == netip.MustParseAddr("93.184.216.35") {
		return nil, errors.New("test dial: connection refused")
	}
	var d net.Dialer
	if ap.Addr().IsLoopback() {
		return d.DialContext(ctx, network, addr)
	}
	return d.DialContext(ctx, network, e.echo)
}

func (e *proxyEnv) dialedAddrs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.dialed...)
}

// conn starts ServeConn on one end of a fresh socketpair and returns the
// other end.
func (e *proxyEnv) conn(t *testing.T, port uint16) *net.UnixConn {
	t.Helper()
	client, server := socketPair(t, unixStream)
	e.wg.Go(func() { e.p.ServeConn(e.ctx, server, port) })
	return client
}

func TestProxyConnect(t *testing.T) {
	public := "93.184.216.34"
	names := map[string][]netip.Addr{
		"example.com":          addrs(public),
		"api.github.com":       addrs(public),
		"loop.example.com":     addrs("127.0.0.1"),
		"ten.example.com":      addrs("10.0.0.1"),
		"meta.example.com":     addrs("169.254.169.254"),
		"mapped.example.com":   addrs("::ffff:127.0.0.1"),
		"nat64.example.com":    addrs("64:ff9b::a9fe:a9fe"),
		"mixed.example.com":    addrs("10.0.0.1", "::1", public),
		"v6.example.com":       addrs("2606:2800:220:1:248:1893:25c8:1946"),
		"down.example.com":     addrs("93.184.216.35"),
		"fallback.example.com": addrs("93.184.216.35", public),
		"empty.example.com":    nil,
	}
	grants := []string{
		"example.com:443", "*.github.com:443", "loop.example.com:443", "ten.example.com:443",
		"meta.example.com:80", "mapped.example.com:443", "nat64.example.com:443",
		"mixed.example.com:443", "v6.example.com:443", "down.example.com:443",
		"fallback.example.com:443", "empty.example.com:443", "unknown.example.com:443",
		"93.184.216.34:443", "10.0.0.1:443", "127.1:443x",
	}
	var pol Policy
	for _, s := range grants {
		g, err := ParseGrant(s, false)
		if err != nil {
			continue // "127.1:443x" is there to prove a bad grant grants nothing
		}
		pol.Allow = append(pol.Allow, g)
	}
	pol.ProxyPort = testProxyPort

	tests := []struct {
		name       string
		request    string
		wantStatus int
		wantCalls  int64  // resolver lookups
		wantDial   string // the one address dialled, if any
		wantReason string // substring of Event.Reason
		wantTarget string
	}{
		{name: "allowed name", request: "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 200, wantCalls: 1, wantDial: public + ":443", wantTarget: "example.com:443"},
		{name: "allowed HTTP/1.0 with headers", request: "CONNECT example.com:443 HTTP/1.0\r\nHost: example.com:443\r\nUser-Agent: t\r\n\r\n",
			wantStatus: 200, wantCalls: 1, wantDial: public + ":443"},
		{name: "suffix grant, case and trailing dot", request: "CONNECT API.GitHub.com.:443 HTTP/1.1\r\n\r\n",
			wantStatus: 200, wantCalls: 1, wantDial: public + ":443", wantTarget: "api.github.com:443"},
		{name: "IPv6 answer", request: "CONNECT v6.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 200, wantCalls: 1, wantDial: "[2606:2800:220:1:248:1893:25c8:1946]:443"},
		{name: "public IP literal granted", request: "CONNECT 93.184.216.34:443 HTTP/1.1\r\n\r\n",
			wantStatus: 200, wantCalls: 0, wantDial: public + ":443"},
		{name: "mixed answers dial the public one", request: "CONNECT mixed.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 200, wantCalls: 1, wantDial: public + ":443"},

		{name: "denied name", request: "CONNECT evil.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantReason: "not in allow list", wantTarget: "evil.com:443"},
		{name: "subdomain of exact grant", request: "CONNECT www.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantReason: "not in allow list"},
		{name: "wrong port", request: "CONNECT example.com:80 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantReason: "not in allow list"},
		{name: "Host header cannot change the target", request: "CONNECT evil.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
			wantStatus: 403, wantReason: "not in allow list"},
		{name: "resolves to loopback", request: "CONNECT loop.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantCalls: 1, wantReason: "resolves to loopback address 127.0.0.1"},
		{name: "resolves to private", request: "CONNECT ten.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantCalls: 1, wantReason: "resolves to private address 10.0.0.1"},
		{name: "resolves to metadata", request: "CONNECT meta.example.com:80 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantCalls: 1, wantReason: "169.254.169.254"},
		{name: "resolves to mapped loopback", request: "CONNECT mapped.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantCalls: 1, wantReason: "embeds 127.0.0.1"},
		{name: "resolves to NAT64 metadata", request: "CONNECT nat64.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantCalls: 1, wantReason: "embeds 169.254.169.254"},
		{name: "private IP literal granted without Private", request: "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n",
			wantStatus: 403, wantReason: "target is private address 10.0.0.1"},

		{name: "resolve failure", request: "CONNECT unknown.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 502, wantCalls: 1, wantReason: "resolve unknown.example.com"},
		{name: "no addresses", request: "CONNECT empty.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 502, wantCalls: 1, wantReason: "no addresses"},
		{name: "dial failure", request: "CONNECT down.example.com:443 HTTP/1.1\r\n\r\n",
			wantStatus: 502, wantCalls: 1, wantDial: "93.184.216.35:443", wantReason: "dial 93.184.216.35:443"},

		{name: "GET absolute URI", request: "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
			wantStatus: 405, wantReason: "not allowed"},
		{name: "ambiguous literal", request: "CONNECT 127.1:443 HTTP/1.1\r\n\r\n",
			wantStatus: 400, wantReason: "ambiguous IP literal"},
		{name: "decimal literal", request: "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n",
			wantStatus: 400, wantReason: "ambiguous IP literal"},
		{name: "brackets", request: "CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
			wantStatus: 400, wantReason: "IPv6"},
		{name: "oversize", request: "CONNECT example.com:443 HTTP/1.1\r\nX: " + strings.Repeat("y", 3000) + "\r\n\r\n",
			wantStatus: 400, wantReason: "longer than 2048"},
		{name: "garbage with terminator", request: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
			wantStatus: 400, wantReason: "malformed request line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newProxyEnv(t, pol, names)
			c := e.conn(t, testProxyPort)
			_ = c.SetDeadline(time.Now().Add(waitTimeout))
			if _, err := io.WriteString(c, tt.request); err != nil {
				t.Fatalf("write request: %v", err)
			}
			br := bufio.NewReader(c)
			if got := readReply(t, br); got != tt.wantStatus {
				t.Fatalf("status %d, want %d", got, tt.wantStatus)
			}
			const msg = "ping through the proxy"
			if tt.wantStatus == 200 {
				echoRoundTrip(t, c, br, msg)
				_ = c.CloseWrite()
			}
			expectEOF(t, br, c)

			ev := e.rec.next(t)
			e.rec.none(t)
			if got := e.res.calls.Load(); got != tt.wantCalls {
				t.Errorf("resolver called %d times, want %d", got, tt.wantCalls)
			}
			dialed := e.dialedAddrs()
			switch {
			case tt.wantDial == "" && len(dialed) != 0:
				t.Errorf("dialled %v, want nothing", dialed)
			case tt.wantDial != "" && (len(dialed) != 1 || dialed[0] != tt.wantDial):
				t.Errorf("dialled %v, want [%s]", dialed, tt.wantDial)
			}
			if ev.Kind != KindConnect || ev.Port != testProxyPort {
				t.Errorf("event kind %q port %d, want connect %d", ev.Kind, ev.Port, testProxyPort)
			}
			if tt.wantTarget != "" && ev.Target != tt.wantTarget {
				t.Errorf("event target %q, want %q", ev.Target, tt.wantTarget)
			}
			if !strings.Contains(ev.Reason, tt.wantReason) {
				t.Errorf("event reason %q, want it to contain %q", ev.Reason, tt.wantReason)
			}
			if ev.Time.IsZero() || ev.DurationMS <= 0 {
				t.Errorf("event time %v duration %v", ev.Time, ev.DurationMS)
			}
			if tt.wantStatus == 200 {
				if ev.Decision != DecisionAllow || ev.Addr != tt.wantDial {
					t.Errorf("event decision %q addr %q, want allow %s", ev.Decision, ev.Addr, tt.wantDial)
				}
				if ev.BytesUp != int64(len(msg)) || ev.BytesDown != int64(len(msg)) {
					t.Errorf("event bytes up %d down %d, want %d each", ev.BytesUp, ev.BytesDown, len(msg))
				}
			} else if ev.Decision != DecisionDeny || ev.BytesUp != 0 || ev.BytesDown != 0 {
				t.Errorf("event %+v, want deny without bytes", ev)
			}
		})
	}
}

func TestProxyDialFallback(t *testing.T) {
	g, _ := ParseGrant("fallback.example.com:443", false)
	e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort},
		map[string][]netip.Addr{"fallback.example.com": addrs("93.184.216.35", "93.184.216.34")})
	c := e.conn(t, testProxyPort)
	io.WriteString(c, "CONNECT fallback.example.com:443 HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	if got := readReply(t, br); got != 200 {
		t.Fatalf("status %d, want 200", got)
	}
	echoRoundTrip(t, c, br, "x")
	c.Close()
	ev := e.rec.next(t)
	if want := []string{"93.184.216.35:443", "93.184.216.34:443"}; fmt.Sprint(e.dialedAddrs()) != fmt.Sprint(want) {
		t.Errorf("dialled %v, want %v", e.dialedAddrs(), want)
	}
	if ev.Addr != "93.184.216.34:443" || ev.Decision != DecisionAllow {
		t.Errorf("event %+v", ev)
	}
}

func TestProxyPrivateGrant(t *testing.T) {
	target := echoServer(t)
	for _, private := range []bool{true, false} {
		t.Run(fmt.Sprintf("private=%v", private), func(t *testing.T) {
			g, err := ParseGrant(target, private)
			if err != nil {
				t.Fatal(err)
			}
			e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort}, nil)
			e.p.Dial = nil // the real dialer
			c := e.conn(t, testProxyPort)
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
			br := bufio.NewReader(c)
			got := readReply(t, br)
			ev := Event{}
			if private {
				if got != 200 {
					t.Fatalf("status %d, want 200", got)
				}
				echoRoundTrip(t, c, br, "hello loopback")
				c.Close()
				ev = e.rec.next(t)
				if ev.Decision != DecisionAllow || ev.Addr != target {
					t.Errorf("event %+v, want allow %s", ev, target)
				}
			} else {
				if got != 403 {
					t.Fatalf("status %d, want 403", got)
				}
				ev = e.rec.next(t)
				if !strings.Contains(ev.Reason, "loopback address 127.0.0.1") {
					t.Errorf("reason %q", ev.Reason)
				}
			}
			if e.res.calls.Load() != 0 {
				t.Error("an IP literal was resolved")
			}
		})
	}
}

func TestProxyPipelined(t *testing.T) {
	g, _ := ParseGrant("example.com:443", false)
	e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort},
		map[string][]netip.Addr{"example.com": addrs("93.184.216.34")})
	c := e.conn(t, testProxyPort)
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	// The request and the first bytes of the tunnel in one write, as a
	// client that does not wait for the reply sends them.
	const early = "\x16\x03\x01early bytes\r\n\r\nmore"
	io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n"+early)
	br := bufio.NewReader(c)
	if got := readReply(t, br); got != 200 {
		t.Fatalf("status %d, want 200", got)
	}
	buf := make([]byte, len(early))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != early {
		t.Fatalf("echo of early bytes = %q, %v; want %q", buf, err, early)
	}
	echoRoundTrip(t, c, br, "later")
	c.CloseWrite()
	expectEOF(t, br, c)
	ev := e.rec.next(t)
	if want := int64(len(early) + len("later")); ev.BytesUp != want || ev.BytesDown != want {
		t.Errorf("bytes up %d down %d, want %d", ev.BytesUp, ev.BytesDown, want)
	}
}

func TestProxyHandshakeTimeout(t *testing.T) {
	tests := []struct {
		name string
		send string
	}{
		{"silent", ""},
		{"slowloris", "CONNECT example.com:443 HTTP/1.1\r\nX-Slow: "},
		{"garbage", "\x00\x01\x02\x03 binary without end of header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newProxyEnv(t, Policy{ProxyPort: testProxyPort}, nil)
			e.p.HandshakeTimeout = 200 * time.Millisecond
			c := e.conn(t, testProxyPort)
			start := time.Now()
			io.WriteString(c, tt.send)
			stopDrip := make(chan struct{})
			defer close(stopDrip)
			if tt.name == "slowloris" {
				go func() { // one byte every 50ms never finishes the header
					for {
						select {
						case <-stopDrip:
							return
						case <-time.After(50 * time.Millisecond):
							if _, err := io.WriteString(c, "a"); err != nil {
								return
							}
						}
					}
				}()
			}
			expectEOF(t, c, c)
			if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
				t.Errorf("closed after %v, want about 200ms", d)
			}
			ev := e.rec.next(t)
			if ev.Decision != DecisionDeny || !strings.Contains(ev.Reason, "timeout") {
				t.Errorf("event %+v, want deny for timeout", ev)
			}
		})
	}
}

func TestProxyIdleTimeout(t *testing.T) {
	g, _ := ParseGrant("example.com:443", false)
	e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort},
		map[string][]netip.Addr{"example.com": addrs("93.184.216.34")})
	e.p.IdleTimeout = 300 * time.Millisecond
	c := e.conn(t, testProxyPort)
	io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	if got := readReply(t, br); got != 200 {
		t.Fatalf("status %d", got)
	}
	// Activity keeps it open past the timeout...
	start := time.Now()
	var quiet time.Time
	for time.Since(start) < 600*time.Millisecond {
		time.Sleep(100 * time.Millisecond)
		echoRoundTrip(t, c, br, "tick")
		quiet = time.Now()
	}
	// ...silence ends it.
	expectEOF(t, br, c)
	if d := time.Since(quiet); d < 200*time.Millisecond {
		t.Errorf("closed %v after the last byte, want about 300ms", d)
	}
	ev := e.rec.next(t)
	if ev.Decision != DecisionAllow || ev.Reason != "idle timeout" || ev.BytesUp < 16 {
		t.Errorf("event %+v, want allow ended by idle timeout", ev)
	}
}

func TestProxyMaxConns(t *testing.T) {
	e := newProxyEnv(t, Policy{ProxyPort: testProxyPort}, nil)
	e.p.MaxConns = 1
	first := e.conn(t, testProxyPort) // holds its slot in the handshake
	deadline := time.Now().Add(waitTimeout)
	for e.p.active.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("first connection not served")
		}
		time.Sleep(time.Millisecond)
	}
	second := e.conn(t, testProxyPort)
	expectEOF(t, second, second)
	ev := e.rec.next(t)
	if ev.Decision != DecisionDeny || ev.Reason != "connection limit" {
		t.Errorf("event %+v, want deny connection limit", ev)
	}
	first.Close()
	if ev := e.rec.next(t); ev.Reason == "connection limit" {
		t.Errorf("first connection: %+v", ev)
	}
	// The slot is free again.
	third := e.conn(t, testProxyPort)
	io.WriteString(third, "GET / HTTP/1.1\r\n\r\n")
	if got := readReply(t, bufio.NewReader(third)); got != 405 {
		t.Errorf("status %d, want 405", got)
	}
}

func TestProxyPorts(t *testing.T) {
	mcp := echoServer(t)
	mcpPort := uint16(0)
	if ap, err := netip.ParseAddrPort(mcp); err == nil {
		mcpPort = ap.Port()
	}
	e := newProxyEnv(t, Policy{ProxyPort: testProxyPort, MCPPorts: []uint16{mcpPort}}, nil)

	t.Run("mcp", func(t *testing.T) {
		c := e.conn(t, mcpPort)
		echoRoundTrip(t, c, c, "tools/list")
		c.CloseWrite()
		expectEOF(t, c, c)
		ev := e.rec.next(t)
		want := fmt.Sprintf("127.0.0.1:%d", mcpPort)
		if ev.Kind != KindMCP || ev.Decision != DecisionAllow || ev.Target != want || ev.Addr != want ||
			ev.BytesUp != 10 || ev.BytesDown != 10 {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("port not granted", func(t *testing.T) {
		c := e.conn(t, 5432)
		expectEOF(t, c, c)
		ev := e.rec.next(t)
		if ev.Kind != KindConnect || ev.Decision != DecisionDeny || ev.Reason != "port not granted" || ev.Port != 5432 {
			t.Errorf("event %+v", ev)
		}
	})
	if got := e.dialedAddrs(); len(got) != 1 || got[0] != mcp {
		t.Errorf("dialled %v, want [%s]", got, mcp)
	}
}

func TestProxyCancel(t *testing.T) {
	g, _ := ParseGrant("example.com:443", false)
	e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort},
		map[string][]netip.Addr{"example.com": addrs("93.184.216.34")})
	ctx, cancel := context.WithCancel(context.Background())
	client, server := socketPair(t, unixStream)
	done := make(chan struct{})
	go func() { e.p.ServeConn(ctx, server, testProxyPort); close(done) }()
	io.WriteString(client, "CONNECT example.com:443 HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(client)
	if got := readReply(t, br); got != 200 {
		t.Fatalf("status %d", got)
	}
	echoRoundTrip(t, client, br, "x")
	cancel()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("ServeConn did not return after cancel")
	}
	expectEOF(t, br, client)
	if ev := e.rec.next(t); ev.Reason != "cancelled" || ev.Decision != DecisionAllow {
		t.Errorf("event %+v", ev)
	}
}
