package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// termFixture is a proxy that terminates api.example.com:443 (a secret
// and a rule) and other.example.com:443 (a secret), whose dials all go to
// one loopback TLS upstream that records what reached it.
type termFixture struct {
	p        *Proxy
	rec      *recorder
	term     *Terminator
	ghPH     string
	otherPH  string
	mu       sync.Mutex
	got      []*http.Request
	bodies   []string
	upstream *httptest.Server
}

const (
	ghReal    = "ghp_REALTOKEN_0123456789"
	otherReal = "other-real-secret"
)

func newTermFixture(t *testing.T, trustUpstream bool) *termFixture {
	t.Helper()
	f := &termFixture{rec: newRecorder(), ghPH: NewPlaceholder("GH_TOKEN"), otherPH: NewPlaceholder("OTHER")}
	f.upstream = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, r.Clone(context.Background()))
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	f.upstream.Config.ErrorLog = log.New(io.Discard, "", 0) // the hostile cases' failed handshakes
	f.upstream.StartTLS()
	t.Cleanup(f.upstream.Close)
	roots := x509.NewCertPool()
	if trustUpstream {
		roots.AddCert(f.upstream.Certificate())
	}
	rule, err := ParseHTTPRule("GET,HEAD api.example.com:443/repos/soda")
	if err != nil {
		t.Fatal(err)
	}
	f.term, err = NewTerminator([]Secret{
		{Name: "GH_TOKEN", Value: ghReal, Placeholder: f.ghPH, Hosts: []string{"api.example.com:443"}},
		{Name: "OTHER", Value: otherReal, Placeholder: f.otherPH, Hosts: []string{"other.example.com:443"}},
	}, []HTTPRule{rule}, roots)
	if err != nil {
		t.Fatal(err)
	}
	upAddr := f.upstream.Listener.Addr().String()
	var pol Policy
	for _, g := range []string{"api.example.com:443", "other.example.com:443", "plain.example.com:443"} {
		gr, _ := ParseGrant(g, false)
		pol.Allow = append(pol.Allow, gr)
	}
	pol.ProxyPort = testProxyPort
	f.p = &Proxy{Policy: pol, Log: testLogger(t), Audit: f.rec.audit, Terminate: f.term, Local: noLocal{},
		Resolver: &fakeResolver{names: map[string][]netip.Addr{
			"api.example.com": addrs("93.184.216.34"), "other.example.com": addrs("93.184.216.34"), "plain.example.com": addrs("93.184.216.34")}},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, upAddr)
		}}
	return f
}

// serve hands the proxy a fresh connection, as the relay does, and
// returns the client's end (closed when the test ends).
func (f *termFixture) serve(t *testing.T) net.Conn {
	t.Helper()
	ln := listen(t)
	a, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go f.p.ServeConn(context.Background(), b, testProxyPort)
	t.Cleanup(func() { a.Close() })
	return a
}

// connect opens a CONNECT tunnel to target through the proxy and returns
// the client's end.
func (f *termFixture) connect(t *testing.T, target string) net.Conn {
	t.Helper()
	a := f.serve(t)
	_ = a.SetDeadline(time.Now().Add(waitTimeout))
	fmt.Fprintf(a, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(a)
	if code := readReply(t, br); code != 200 {
		t.Fatalf("CONNECT %s: %d", target, code)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT reply")
	}
	return a
}

// tlsTo does the sandbox's TLS handshake, trusting the sandbox CA.
func (f *termFixture) tlsTo(t *testing.T, c net.Conn, serverName string) (*tls.Conn, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.term.CACert())
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: pool})
	return tc, tc.Handshake()
}

func roundTrip(t *testing.T, tc *tls.Conn, br *bufio.Reader, req *http.Request) (*http.Response, string) {
	t.Helper()
	if err := req.Write(tc); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// nextHTTP returns the next audit event of kind http.
func (f *termFixture) nextHTTP(t *testing.T) Event {
	t.Helper()
	for {
		ev := f.rec.next(t)
		if ev.Kind == KindHTTP {
			return ev
		}
	}
}

func TestTerminate(t *testing.T) {
	parent := t
	f := newTermFixture(t, true)
	c := f.connect(t, "api.example.com:443")
	tc, err := f.tlsTo(t, c, "api.example.com")
	if err != nil {
		t.Fatalf("TLS with the sandbox CA: %v", err)
	}
	br := bufio.NewReader(tc)
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + f.ghPH))
	for i, tc2 := range []struct {
		name, method, path string
		hdr                map[string]string
		body               string
		status             int
		upstreamAuth       string // what the upstream must see
		reason             string
	}{
		{name: "bearer placeholder replaced", method: "GET", path: "/repos/soda/x?token=" + "q", hdr: map[string]string{"Authorization": "token " + f.ghPH},
			status: 200, upstreamAuth: "token " + ghReal},
		{name: "basic auth placeholder replaced", method: "GET", path: "/repos/soda", hdr: map[string]string{"Authorization": "Basic " + basic},
			status: 200, upstreamAuth: "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ghReal))},
		{name: "body placeholder left alone", method: "HEAD", path: "/repos/soda/y", body: "", hdr: map[string]string{"X-Note": "none"}, status: 200},
		{name: "method not in the rule", method: "POST", path: "/repos/soda/x", body: "k=" + f.ghPH, status: 403, reason: "is not allowed"},
		{name: "path not in the rule", method: "GET", path: "/admin", status: 403, reason: "is not allowed"},
		{name: "prefix is a path element, not a string prefix", method: "GET", path: "/repos/sodax", status: 403, reason: "is not allowed"},
		{name: "dot segments", method: "GET", path: "/repos/soda/../../admin", status: 403, reason: "is not allowed"},
		{name: "encoded slash", method: "GET", path: "/repos/soda%2F..%2Fadmin", status: 403, reason: "is not allowed"},
		{name: "another host's placeholder", method: "GET", path: "/repos/soda", hdr: map[string]string{"X-Leak": f.otherPH}, status: 403, reason: "exfiltration attempt: placeholder of another host's secret: OTHER"},
		{name: "another host's placeholder in the query", method: "GET", path: "/repos/soda?x=" + f.otherPH, status: 403, reason: "exfiltration"},
	} {
		t.Run(tc2.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc2.method, "https://api.example.com"+tc2.path, strings.NewReader(tc2.body))
			if tc2.body == "" {
				req.Body = nil
			}
			for k, v := range tc2.hdr {
				req.Header.Set(k, v)
			}
			f.mu.Lock()
			before := len(f.got)
			f.mu.Unlock()
			resp, body := roundTrip(t, tc, br, req)
			if resp.StatusCode != tc2.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc2.status, body)
			}
			ev := f.nextHTTP(t)
			if ev.Method != tc2.method || ev.Status != tc2.status || strings.Contains(ev.Path, "?") || ev.Target != "api.example.com:443" {
				t.Errorf("audit %+v", ev)
			}
			if !strings.Contains(ev.Reason, tc2.reason) {
				t.Errorf("audit reason %q, want %q", ev.Reason, tc2.reason)
			}
			f.mu.Lock()
			n := len(f.got) - before
			var up *http.Request
			if n > 0 {
				up = f.got[len(f.got)-1]
			}
			f.mu.Unlock()
			if tc2.status != 200 {
				if n != 0 {
					t.Fatal("a refused request reached the upstream")
				}
				if !strings.Contains(body, "refused by the sandbox policy") || resp.Header.Get("X-Soda-Refused") != "1" {
					t.Errorf("refusal body %q", body)
				}
				// The proxy closes after a refusal: reconnect for the next.
				c = f.connect(parent, "api.example.com:443")
				if tc, err = f.tlsTo(parent, c, "api.example.com"); err != nil {
					t.Fatal(err)
				}
				br = bufio.NewReader(tc)
				return
			}
			if n != 1 {
				t.Fatalf("%d requests reached the upstream", n)
			}
			if got := up.Header.Get("Authorization"); got != tc2.upstreamAuth {
				t.Errorf("upstream Authorization %q, want %q", got, tc2.upstreamAuth)
			}
			_ = i
		})
	}
}

// TestTerminateBodyNotReplaced: a placeholder in a body goes as it is.
func TestTerminateBodyNotReplaced(t *testing.T) {
	f := newTermFixture(t, true)
	c := f.connect(t, "other.example.com:443")
	tc, err := f.tlsTo(t, c, "other.example.com")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "https://other.example.com/x", strings.NewReader("secret="+f.otherPH))
	req.Header.Set("Authorization", "Bearer "+f.otherPH)
	resp, _ := roundTrip(t, tc, bufio.NewReader(tc), req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bodies[0] != "secret="+f.otherPH || f.got[0].Header.Get("Authorization") != "Bearer "+otherReal {
		t.Fatalf("upstream got body %q, Authorization %q", f.bodies[0], f.got[0].Header.Get("Authorization"))
	}
}

func TestTerminateHostile(t *testing.T) {
	t.Run("SNI differs from the CONNECT host", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		if _, err := f.tlsTo(t, c, "other.example.com"); err == nil {
			t.Fatal("handshake with another server name succeeded")
		}
		ev := f.rec.next(t)
		if ev.Decision != DecisionDeny || !strings.Contains(ev.Reason, "is not the CONNECT host") {
			t.Fatalf("audit %+v", ev)
		}
	})
	t.Run("no SNI: the CONNECT host's certificate", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if cn := tc.ConnectionState().PeerCertificates[0].DNSNames; len(cn) != 1 || cn[0] != "api.example.com" {
			t.Fatalf("certificate for %v", cn)
		}
	})
	t.Run("upstream with an untrusted certificate", func(t *testing.T) {
		f := newTermFixture(t, false)
		c := f.connect(t, "api.example.com:443")
		tc, err := f.tlsTo(t, c, "api.example.com")
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://api.example.com/repos/soda", nil)
		req.Header.Set("Authorization", "token "+f.ghPH)
		resp, body := roundTrip(t, tc, bufio.NewReader(tc), req)
		if resp.StatusCode != 502 || !strings.Contains(body, "certificate") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if ev := f.nextHTTP(t); !strings.Contains(ev.Reason, "certificate") {
			t.Fatalf("audit %+v", ev)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.got) != 0 {
			t.Fatal("the untrusted upstream got the request")
		}
	})
	t.Run("HTTP/2 preface", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		tc, err := f.tlsTo(t, c, "api.example.com")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		b, _ := io.ReadAll(tc)
		if strings.Contains(string(b), "upstream saw") {
			t.Fatalf("an HTTP/2 preface reached the upstream: %q", b)
		}
	})
	t.Run("huge header", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		tc, err := f.tlsTo(t, c, "api.example.com")
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://api.example.com/repos/soda", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 2*termMaxHeaderBytes))
		resp, _ := roundTrip(t, tc, bufio.NewReader(tc), req)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("a placeholder split across header lines", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		tc, err := f.tlsTo(t, c, "api.example.com")
		if err != nil {
			t.Fatal(err)
		}
		half := len(f.ghPH) / 2
		fmt.Fprintf(tc, "GET /repos/soda HTTP/1.1\r\nHost: api.example.com\r\nX-Token: %s\r\n %s\r\n\r\n", f.ghPH[:half], f.ghPH[half:])
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err == nil {
			resp.Body.Close()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, r := range f.got {
			for k, v := range r.Header {
				if strings.Contains(strings.Join(v, ""), ghReal) {
					t.Fatalf("a folded placeholder became the secret in %s", k)
				}
			}
		}
	})
	t.Run("pipelined requests are served in order", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "api.example.com:443")
		tc, err := f.tlsTo(t, c, "api.example.com")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tc, "GET /repos/soda/1 HTTP/1.1\r\nHost: api.example.com\r\n\r\nGET /repos/soda/2 HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
		br := bufio.NewReader(tc)
		for _, want := range []string{"/repos/soda/1", "/repos/soda/2"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if !strings.HasSuffix(string(b), want) {
				t.Fatalf("got %q, want %s", b, want)
			}
		}
	})
	t.Run("a host without secret or rule keeps the opaque tunnel", func(t *testing.T) {
		f := newTermFixture(t, true)
		c := f.connect(t, "plain.example.com:443")
		// The upstream's own certificate comes through: not terminated.
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if got := tc.ConnectionState().PeerCertificates[0]; got.Equal(f.upstream.Certificate()) == false {
			t.Fatalf("certificate %v, want the upstream's", got.Subject)
		}
	})
}

func TestParseHTTPRule(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "GET api.github.com:443/repos/x", want: "GET api.github.com:443/repos/x"},
		{in: "GET,POST API.GitHub.com:443/", want: "GET,POST api.github.com:443/"},
		{in: "* example.com:443/v1", want: "* example.com:443/v1"},
		{in: "get example.com:443/", err: "upper-case"},
		{in: "GET *.example.com:443/", err: "one host"},
		{in: "GET example.com/", err: "port"},
		{in: "GET example.com:443/x?y=1", err: "no query"},
		{in: "example.com:443/", err: "want 'METHOD"},
	} {
		r, err := ParseHTTPRule(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("%q: %v %v, want %q", tc.in, r, err, tc.want)
		}
	}
}

// noLocal is a host with no addresses of its own.
type noLocal struct{}

func (noLocal) Local(netip.Addr) (string, bool) { return "", false }

// TestTerminateHostCost: an agent that opens terminated connections and
// then sends nothing (or stops mid-request) costs the host a bounded
// number of goroutines, whatever it tries: the proxy's connection cap
// refuses the rest, the TLS and header deadlines end the stalled ones,
// and once they are closed the host is back where it was.
func TestTerminateHostCost(t *testing.T) {
	f := newTermFixture(t, true)
	f.p.MaxConns = 8
	f.p.HandshakeTimeout = 300 * time.Millisecond
	runtime.GC()
	base := runtime.NumGoroutine()
	var conns []net.Conn
	refused := 0
	for i := 0; i < 100; i++ {
		a := f.serve(t)
		conns = append(conns, a)
		// Half stall before TLS, half after the CONNECT line.
		if i%2 == 0 {
			fmt.Fprintf(a, "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
		}
	}
	time.Sleep(100 * time.Millisecond)
	peak := runtime.NumGoroutine() - base
	// Each served connection costs a few goroutines (proxy, TLS, HTTP
	// server); 100 connections with a cap of 8 must not cost 100 of them.
	if peak > 8*6 {
		t.Errorf("%d goroutines for 100 stalled connections with MaxConns 8", peak)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev := f.rec.next(t)
		if ev.Reason == "connection limit" {
			refused++
		}
		if refused >= 100-8 || time.Now().After(deadline) {
			break
		}
	}
	if refused < 100-8 {
		t.Errorf("%d connections refused over the cap of 8, want %d", refused, 100-8)
	}
	for _, c := range conns {
		c.Close()
	}
	// The stalled ones end by their deadlines: the host is back.
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine() - base; n > 4 {
		t.Errorf("%d goroutines left after the connections ended", n)
	}
	t.Logf("100 stalled connections: %d more goroutines at the peak, %d refused by the cap", peak, refused)
}
