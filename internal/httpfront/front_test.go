package httpfront

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// server is a Front serving on a real loopback listener.
type server struct {
	front *Front
	addr  string // 127.0.0.1:PORT
	port  string
	calls atomic.Int64 // requests that reached the wrapped handler
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start serves a Front with opts on 127.0.0.1:0 until the test ends. The
// wrapped handler answers 200 "next".
func start(t *testing.T, opts Options) *server {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "test"
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 10 * time.Second
	}
	s := &server{}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		io.WriteString(w, "next")
	})
	s.front = New(discardLogger(), opts, next)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	_, s.port, _ = net.SplitHostPort(s.addr)
	done := make(chan error, 1)
	go func() { done <- s.front.Serve(l) }()
	t.Cleanup(func() {
		s.front.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return within 5s of Close")
		}
	})
	return s
}

// request describes one HTTP request to the front.
type request struct {
	method string
	path   string
	host   string // Host header; default: the listener's address
	header map[string]string
}

type response struct {
	status int
	header http.Header
	body   string
}

func (s *server) do(t *testing.T, rq request) response {
	t.Helper()
	if rq.method == "" {
		rq.method = http.MethodGet
	}
	if rq.path == "" {
		rq.path = "/mcp"
	}
	req, err := http.NewRequest(rq.method, "http://"+s.addr+rq.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rq.host != "" {
		req.Host = rq.host
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", rq.method, rq.path, req.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func bearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// checkDenyBody checks that a refusal is a JSON-RPC error with a null id.
func checkDenyBody(t *testing.T, r response) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("refusal Content-Type = %q, want application/json", ct)
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &msg); err != nil {
		t.Fatalf("refusal body %q is not JSON: %v", r.body, err)
	}
	if msg.JSONRPC != "2.0" || string(msg.ID) != "null" || msg.Error.Code != -32600 || msg.Error.Message == "" {
		t.Errorf("refusal body %q is not a JSON-RPC error with id null and code -32600", r.body)
	}
}

func TestHost(t *testing.T) {
	s := start(t, Options{Token: testToken})
	otherPort := "1"
	if s.port == "1" {
		otherPort = "2"
	}
	tests := []struct {
		name string
		host string
		want int
	}{
		{"ipv4 loopback", "127.0.0.1:" + s.port, http.StatusOK},
		{"localhost", "localhost:" + s.port, http.StatusOK},
		{"LOCALHOST", "LOCALHOST:" + s.port, http.StatusOK},
		{"ipv6 loopback", "[::1]:" + s.port, http.StatusOK},
		{"other 127/8 address", "127.0.0.2:" + s.port, http.StatusOK},
		{"wrong port", "127.0.0.1:" + otherPort, http.StatusForbidden},
		{"rebinding name", "evil.example:" + s.port, http.StatusForbidden},
		{"localhost suffix", "localhost.evil.example:" + s.port, http.StatusForbidden},
		{"any address", "0.0.0.0:" + s.port, http.StatusForbidden},
		{"missing port", "127.0.0.1", http.StatusForbidden},
		{"localhost without port", "localhost", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.calls.Load()
			r := s.do(t, request{host: tt.host, header: bearer(testToken)})
			if r.status != tt.want {
				t.Fatalf("Host %q: status %d, want %d (body %q)", tt.host, r.status, tt.want, r.body)
			}
			reached := s.calls.Load() - before
			if tt.want == http.StatusOK {
				if r.body != "next" || reached != 1 {
					t.Errorf("Host %q: body %q, handler calls %d; want the wrapped handler's answer", tt.host, r.body, reached)
				}
				return
			}
			if reached != 0 {
				t.Errorf("Host %q: refused request reached the wrapped handler", tt.host)
			}
			checkDenyBody(t, r)
			if !strings.Contains(r.body, "DNS rebinding") {
				t.Errorf("Host %q: body %q should explain the DNS rebinding protection", tt.host, r.body)
			}
		})
	}
	t.Run("host is checked before the token", func(t *testing.T) {
		r := s.do(t, request{host: "evil.example:" + s.port})
		if r.status != http.StatusForbidden {
			t.Errorf("bad Host without token: status %d, want 403", r.status)
		}
	})
}

func TestOrigin(t *testing.T) {
	s := start(t, Options{Token: testToken})
	tests := []struct {
		name   string
		origin string // "" sends no Origin header
		want   int
	}{
		{"absent", "", http.StatusOK},
		{"localhost with port", "http://localhost:3000", http.StatusOK},
		{"ipv4 loopback", "http://127.0.0.1", http.StatusOK},
		{"ipv6 loopback https", "https://[::1]:8443", http.StatusOK},
		{"remote https", "https://evil.example", http.StatusForbidden},
		{"remote http with loopback port", "http://evil.example:" + s.port, http.StatusForbidden},
		{"localhost suffix", "http://localhost.evil.example", http.StatusForbidden},
		{"null", "null", http.StatusForbidden},
		{"file scheme", "file://localhost", http.StatusForbidden},
		{"not a URL", "::::", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := bearer(testToken)
			if tt.origin != "" {
				h["Origin"] = tt.origin
			}
			before := s.calls.Load()
			r := s.do(t, request{header: h})
			if r.status != tt.want {
				t.Fatalf("Origin %q: status %d, want %d (body %q)", tt.origin, r.status, tt.want, r.body)
			}
			if tt.want == http.StatusForbidden {
				if s.calls.Load() != before {
					t.Errorf("Origin %q: refused request reached the wrapped handler", tt.origin)
				}
				checkDenyBody(t, r)
				if !strings.Contains(r.body, "Origin") {
					t.Errorf("Origin %q: body %q should name the Origin check", tt.origin, r.body)
				}
			}
		})
	}
}

func TestAuth(t *testing.T) {
	s := start(t, Options{Name: "jira", Token: testToken})
	const realm = `Bearer realm="soda-mcp/jira"`
	tests := []struct {
		name          string
		authorization string // "" sends no Authorization header
		want          int
		wantChallenge string // exact WWW-Authenticate on 401
	}{
		{"no credentials", "", http.StatusUnauthorized, realm},
		{"wrong token", "Bearer " + strings.Repeat("f", len(testToken)), http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"shorter token", "Bearer " + testToken[:len(testToken)-1], http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"longer token", "Bearer " + testToken + "0", http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"token prefix", "Bearer 0123", http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"wrong scheme", "Basic " + testToken, http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"scheme without token", "Bearer", http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"empty token", "Bearer ", http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"uppercase token", "Bearer " + strings.ToUpper(testToken), http.StatusUnauthorized, realm + `, error="invalid_token"`},
		{"right token", "Bearer " + testToken, http.StatusOK, ""},
		{"lowercase scheme", "bearer " + testToken, http.StatusOK, ""},
		{"uppercase scheme", "BEARER " + testToken, http.StatusOK, ""},
		{"extra blanks around token", "Bearer   " + testToken + "  ", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{}
			if tt.authorization != "" {
				h["Authorization"] = tt.authorization
			}
			before := s.calls.Load()
			r := s.do(t, request{header: h})
			if r.status != tt.want {
				t.Fatalf("Authorization %q: status %d, want %d (body %q)", tt.authorization, r.status, tt.want, r.body)
			}
			if tt.want == http.StatusOK {
				if r.body != "next" {
					t.Errorf("body %q, want the wrapped handler's answer", r.body)
				}
				if got := r.header.Get("WWW-Authenticate"); got != "" {
					t.Errorf("successful response has WWW-Authenticate %q", got)
				}
				return
			}
			if s.calls.Load() != before {
				t.Errorf("unauthorized request reached the wrapped handler")
			}
			if got := r.header.Get("WWW-Authenticate"); got != tt.wantChallenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.wantChallenge)
			}
			checkDenyBody(t, r)
			if strings.Contains(r.body, testToken) {
				t.Errorf("401 body leaks the token: %q", r.body)
			}
			if !strings.Contains(r.body, "sodactl mcp token jira") {
				t.Errorf("401 body %q should tell how to get the token", r.body)
			}
		})
	}
}

// TestAuthHintNamesTokenCommand: a 401 names the command that prints the
// token: sodactl mcp token NAME for a bridge, the one it is given for
// another server (a validation worker's token is not a bridge's).
func TestAuthHintNamesTokenCommand(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		want    string
		wantNot string
	}{
		{"bridge", Options{Name: "jira", Token: testToken}, "(sodactl mcp token jira)", ""},
		{"validator", Options{Name: "validate-shellcheck", Token: testToken, TokenCommand: "sodactl validate token shellcheck"},
			"(sodactl validate token shellcheck)", "sodactl mcp token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, tt.opts)
			r := s.do(t, request{})
			if r.status != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401 (body %q)", r.status, r.body)
			}
			if !strings.Contains(r.body, tt.want) {
				t.Errorf("401 body %q does not name %q", r.body, tt.want)
			}
			if tt.wantNot != "" && strings.Contains(r.body, tt.wantNot) {
				t.Errorf("401 body %q names %q", r.body, tt.wantNot)
			}
		})
	}
}

func TestNoToken(t *testing.T) {
	s := start(t, Options{})
	tests := []struct {
		name string
		path string
		auth map[string]string
		want string
	}{
		{"mcp without credentials", "/mcp", nil, "next"},
		{"mcp with any credentials", "/mcp", bearer("whatever"), "next"},
		{"ready without credentials", "/ready", nil, "ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(t, request{path: tt.path, header: tt.auth})
			if r.status != http.StatusOK || r.body != tt.want {
				t.Errorf("GET %s with empty Token: %d %q, want 200 %q", tt.path, r.status, r.body, tt.want)
			}
		})
	}
	t.Run("host still checked", func(t *testing.T) {
		r := s.do(t, request{host: "evil.example:" + s.port})
		if r.status != http.StatusForbidden {
			t.Errorf("bad Host with empty Token: status %d, want 403", r.status)
		}
	})
}

func TestReady(t *testing.T) {
	s := start(t, Options{Token: testToken})
	steps := []struct {
		name      string
		draining  bool
		method    string
		header    map[string]string
		want      int
		wantBody  string
		wantRetry bool
	}{
		{name: "requires auth", header: nil, want: http.StatusUnauthorized},
		{name: "ready", header: bearer(testToken), want: http.StatusOK, wantBody: "ready\n"},
		{name: "HEAD", method: http.MethodHead, header: bearer(testToken), want: http.StatusOK},
		{name: "POST refused", method: http.MethodPost, header: bearer(testToken), want: http.StatusMethodNotAllowed},
		{name: "draining", draining: true, header: bearer(testToken), want: http.StatusServiceUnavailable, wantBody: "draining\n", wantRetry: true},
		{name: "draining still requires auth", draining: true, header: nil, want: http.StatusUnauthorized},
		{name: "ready again", draining: false, header: bearer(testToken), want: http.StatusOK, wantBody: "ready\n"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			s.front.SetDraining(st.draining)
			before := s.calls.Load()
			r := s.do(t, request{method: st.method, path: "/ready", header: st.header})
			if r.status != st.want {
				t.Fatalf("%s /ready (draining=%v): status %d, want %d (body %q)", st.method, st.draining, r.status, st.want, r.body)
			}
			if st.wantBody != "" && r.body != st.wantBody {
				t.Errorf("/ready body %q, want %q", r.body, st.wantBody)
			}
			if got := r.header.Get("Retry-After"); (got != "") != st.wantRetry {
				t.Errorf("Retry-After = %q, want present=%v", got, st.wantRetry)
			}
			if st.want == http.StatusMethodNotAllowed && r.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("405 Allow = %q, want %q", r.header.Get("Allow"), "GET, HEAD")
			}
			if s.calls.Load() != before {
				t.Errorf("/ready reached the wrapped handler")
			}
		})
	}
}

// rawRequest is an HTTP/1.1 request that closes the connection afterwards.
func rawRequest(host, path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + testToken + "\r\nConnection: close\r\n\r\n"
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// headerRequest is a GET /ready with the token whose request line and
// headers, up to and including the blank line, are exactly size bytes.
func headerRequest(t *testing.T, addr string, size int, close bool) string {
	t.Helper()
	head := "GET /ready HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + testToken + "\r\n"
	if close {
		head += "Connection: close\r\n"
	}
	head += "X-Padding: "
	pad := size - len(head) - len("\r\n\r\n")
	if pad < 0 {
		t.Fatalf("cannot build %d bytes of headers", size)
	}
	return head + strings.Repeat("a", pad) + "\r\n\r\n"
}

// TestMaxHeaderBytes checks that the documented limit is the one enforced,
// to the byte: net/http on its own accepts 4096 bytes more.
func TestMaxHeaderBytes(t *testing.T) {
	tests := []struct {
		name  string
		limit int // MaxHeaderBytes
		size  int // request line and headers
		want  int
	}{
		{"default, well under", 16 << 10, 1000, http.StatusOK},
		{"default, one byte under", 16 << 10, 16<<10 - 1, http.StatusOK},
		{"default, exactly", 16 << 10, 16 << 10, http.StatusOK},
		{"default, one byte over", 16 << 10, 16<<10 + 1, http.StatusRequestHeaderFieldsTooLarge},
		{"default, net/http's slack", 16 << 10, 16<<10 + 4096, http.StatusRequestHeaderFieldsTooLarge},
		{"default, far over", 16 << 10, 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"8K, exactly", 8 << 10, 8 << 10, http.StatusOK},
		{"8K, one byte over", 8 << 10, 8<<10 + 1, http.StatusRequestHeaderFieldsTooLarge},
		{"below net/http's slack, exactly", 1024, 1024, http.StatusOK},
		{"below net/http's slack, one byte over", 1024, 1025, http.StatusRequestHeaderFieldsTooLarge},
		{"below net/http's slack, at net/http's limit", 1024, 4097, http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Token: testToken, MaxHeaderBytes: tt.limit})
			// The first request on a connection, and the second on a kept one.
			for _, second := range []bool{false, true} {
				c := dial(t, s.addr)
				br := bufio.NewReader(c)
				if second {
					if _, err := io.WriteString(c, headerRequest(t, s.addr, 500, false)); err != nil {
						t.Fatal(err)
					}
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					resp, err := http.ReadResponse(br, nil)
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Fatalf("first request: %v %v", resp, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if _, err := io.WriteString(c, headerRequest(t, s.addr, tt.size, true)); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("read response (second request: %v): %v", second, err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("%d bytes of request line and headers with MaxHeaderBytes=%d (second request: %v): status %d, want %d",
						tt.size, tt.limit, second, resp.StatusCode, tt.want)
				}
			}
		})
	}
}

func TestServeRefusesNonLoopback(t *testing.T) {
	tests := []struct {
		network, addr string
	}{
		{"tcp4", "0.0.0.0:0"},
		{"tcp6", "[::]:0"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			l, err := net.Listen(tt.network, tt.addr)
			if err != nil {
				t.Skipf("cannot listen on %s: %v", tt.addr, err)
			}
			defer l.Close()
			f := New(discardLogger(), Options{Token: testToken}, http.NotFoundHandler())
			done := make(chan error, 1)
			go func() { done <- f.Serve(l) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "loopback") {
					t.Errorf("Serve on %s = %v, want an error mentioning loopback", l.Addr(), err)
				}
			case <-time.After(5 * time.Second):
				f.Close()
				t.Fatalf("Serve on %s did not refuse the listener", l.Addr())
			}
		})
	}
}

func TestServeIPv6Loopback(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	f := New(discardLogger(), Options{Token: testToken, ReadTimeout: 5 * time.Second}, http.NotFoundHandler())
	done := make(chan error, 1)
	go func() { done <- f.Serve(l) }()
	defer func() {
		f.Close()
		<-done
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	req, _ := http.NewRequest(http.MethodGet, "http://[::1]:"+port+"/ready", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ready on [::1]: status %d, want 200", resp.StatusCode)
	}
}

func TestServeUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no unix sockets: %v", err)
	}
	f := New(discardLogger(), Options{Token: testToken, ReadTimeout: 5 * time.Second}, http.NotFoundHandler())
	done := make(chan error, 1)
	go func() { done <- f.Serve(l) }()
	defer func() {
		f.Close()
		<-done
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	// Without a TCP port, any loopback host:port is accepted.
	req, _ := http.NewRequest(http.MethodGet, "http://localhost:1234/ready", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ready over a unix socket: status %d, want 200", resp.StatusCode)
	}
}
