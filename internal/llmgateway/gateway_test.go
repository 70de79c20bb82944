package llmgateway

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const realKey = "sk-ant-REAL-do-not-leak-0123456789"

// upstream is a loopback TLS server playing a provider: it records what
// arrived and answers with handler.
type upstream struct {
	srv   *httptest.Server
	pool  *x509.CertPool
	calls atomic.Int64
	mu    sync.Mutex
	reqs  []*http.Request
}

func newUpstream(t *testing.T, handler http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(r.Context()))
		u.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(u.srv.Close)
	u.pool = x509.NewCertPool()
	u.pool.AddCert(u.srv.Certificate())
	return u
}

func (u *upstream) url(t *testing.T, path string) *url.URL {
	t.Helper()
	p, err := ParseUpstream(u.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startGateway serves cfg on a loopback port and returns its base URL.
func startGateway(t *testing.T, cfg Config) (*Gateway, string) {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Start(ln)
	t.Cleanup(func() { g.Close() })
	return g, "http://" + ln.Addr().String()
}

func anthropic(t *testing.T) Provider {
	p, err := Lookup("anthropic")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func post(t *testing.T, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) add(ev Event) { e.mu.Lock(); e.ev = append(e.ev, ev); e.mu.Unlock() }
func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.ev...)
}

func TestGatewayAnthropic(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"message","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":11,"output_tokens":5}}`)
	})
	var rec events
	g, base := startGateway(t, Config{RootCAs: up.pool, Record: rec.add,
		Routes: []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
	ph := g.PlaceholderFor("anthropic")
	if !strings.HasPrefix(ph, "sk-ant-soda-") || len(ph) != len("sk-ant-soda-")+32 {
		t.Fatalf("placeholder %q", ph)
	}
	env := strings.Join(g.Env("127.0.0.1:4000"), " ")
	if want := "ANTHROPIC_BASE_URL=http://127.0.0.1:4000/anthropic ANTHROPIC_API_KEY=" + ph; env != want {
		t.Fatalf("Env = %q, want %q", env, want)
	}

	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"placeholder in x-api-key", map[string]string{"x-api-key": ph}, 200},
		{"placeholder as bearer (ANTHROPIC_AUTH_TOKEN)", map[string]string{"Authorization": "Bearer " + ph}, 200},
		{"no key", nil, 401},
		{"another key", map[string]string{"x-api-key": "sk-ant-attacker"}, 401},
		{"the real key itself is not a placeholder", map[string]string{"x-api-key": realKey}, 401},
		{"placeholder with a suffix", map[string]string{"x-api-key": ph + "x"}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.calls.Load()
			resp, body := post(t, base+"/anthropic/v1/messages?beta=true", tc.hdr, `{"model":"m"}`)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status != 200 {
				if up.calls.Load() != before {
					t.Fatal("a refused request reached the upstream")
				}
				if !strings.Contains(body, `"type":"authentication_error"`) || !strings.Contains(body, "placeholder") {
					t.Fatalf("refusal body %s", body)
				}
				return
			}
			up.mu.Lock()
			r := up.reqs[len(up.reqs)-1]
			up.mu.Unlock()
			if got := r.Header.Get("X-Api-Key"); got != realKey {
				t.Errorf("upstream got x-api-key %q", got)
			}
			if got := r.Header.Get("Authorization"); got != "" {
				t.Errorf("upstream got Authorization %q", got)
			}
			if r.URL.Path != "/v1/messages" || r.URL.RawQuery != "beta=true" {
				t.Errorf("upstream got %s", r.URL)
			}
			for k, v := range r.Header {
				if strings.Contains(strings.Join(v, ","), ph) {
					t.Errorf("the placeholder reached the upstream in %s", k)
				}
			}
		})
	}
	if u := waitUsage(g, (Usage{Input: 22, Output: 10})); u != (Usage{Input: 22, Output: 10}) {
		t.Errorf("usage %+v, want 22 in, 10 out", u)
	}
	evs := rec.all()
	if len(evs) != 6 {
		t.Fatalf("%d events, want 6", len(evs))
	}
	for _, ev := range evs {
		if ev.Path != "/v1/messages" || ev.Provider != "anthropic" || ev.Method != "POST" {
			t.Errorf("event %+v", ev)
		}
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), realKey) || strings.Contains(string(b), ph) || strings.Contains(string(b), "beta") {
			t.Errorf("event holds a key or the query: %s", b)
		}
	}
	if evs[0].Usage.Input != 11 || evs[0].BytesUp != int64(len(`{"model":"m"}`)) || evs[0].BytesDown == 0 {
		t.Errorf("first event %+v", evs[0])
	}
}

// TestGatewayStream: an event stream passes through as it comes (the
// client reads the first event while the upstream still holds the rest)
// and the usage is the stream's final, cumulative one.
func TestGatewayStream(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n")
	})
	g, base := startGateway(t, Config{RootCAs: up.pool,
		Routes: []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
	req, _ := http.NewRequest("POST", base+"/anthropic/v1/messages", strings.NewReader(`{"stream":true}`))
	req.Header.Set("x-api-key", g.PlaceholderFor("anthropic"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		got <- l
	}()
	select {
	case l := <-got:
		if !strings.HasPrefix(l, "event: message_start") {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first event did not pass before the stream ended: buffered")
	}
	close(release)
	_, _ = io.ReadAll(br)
	resp.Body.Close()
	if u := waitUsage(g, (Usage{Input: 100, Output: 42})); u != (Usage{Input: 100, Output: 42}) {
		t.Fatalf("usage %+v, want 100 in, 42 out (the final message_delta)", u)
	}
}

func TestGatewayOpenAI(t *testing.T) {
	p, err := Lookup("openai")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-openai-real" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`)
	})
	g, base := startGateway(t, Config{RootCAs: up.pool,
		Routes: []Route{{Provider: p, Upstream: up.url(t, "/v1"), Key: "sk-openai-real"}}})
	// Codex's exec reads its key from CODEX_API_KEY: it gets the
	// placeholder too.
	ph := g.PlaceholderFor("openai")
	if env := g.Env("127.0.0.1:9"); !slices.Equal(env, []string{"OPENAI_BASE_URL=http://127.0.0.1:9/openai/v1", "OPENAI_API_KEY=" + ph, "CODEX_API_KEY=" + ph}) {
		t.Fatalf("env %q", env)
	}
	// Codex asks for a WebSocket first: refused with 426, which sends it
	// to HTTP at once, and never forwarded (the gateway could not meter it).
	req, _ := http.NewRequest("GET", base+"/openai/responses", nil)
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	ws, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ws.Body.Close()
	if ws.StatusCode != http.StatusUpgradeRequired || up.calls.Load() != 0 {
		t.Fatalf("WebSocket upgrade: %d, %d upstream calls", ws.StatusCode, up.calls.Load())
	}
	// An x-api-key is not how OpenAI's clients send a key.
	resp, body := post(t, base+"/openai/chat/completions", map[string]string{"x-api-key": g.PlaceholderFor("openai")}, "{}")
	if resp.StatusCode != 401 || !strings.Contains(body, `"error":{`) {
		t.Fatalf("x-api-key: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, base+"/openai/chat/completions", map[string]string{"Authorization": "Bearer " + g.PlaceholderFor("openai")}, "{}")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	up.mu.Lock()
	path := up.reqs[len(up.reqs)-1].URL.Path
	up.mu.Unlock()
	if path != "/v1/chat/completions" {
		t.Errorf("upstream path %s", path)
	}
	if u := waitUsage(g, (Usage{Input: 9, Output: 2})); u != (Usage{Input: 9, Output: 2}) {
		t.Errorf("usage %+v", u)
	}
}

func TestGatewayBudget(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"usage":{"input_tokens":10,"output_tokens":5}}`)
	})
	var rec events
	g, base := startGateway(t, Config{RootCAs: up.pool, Budget: 20, Record: rec.add,
		Routes: []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
	hdr := map[string]string{"x-api-key": g.PlaceholderFor("anthropic")}
	for i, want := range []int{200, 200, 403, 403} {
		resp, body := post(t, base+"/anthropic/v1/messages", hdr, "{}")
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d: %s", i, resp.StatusCode, want, body)
		}
		if want == 403 && !strings.Contains(body, "budget of 20 tokens is spent") {
			t.Fatalf("refusal %s", body)
		}
		// The next request comes once this one is accounted (a request
		// sent while one in flight is still being accounted may pass).
		spent := Usage{Input: 10 * int64(min(i+1, 2)), Output: 5 * int64(min(i+1, 2))}
		if u := waitUsage(g, spent); u != spent {
			t.Fatalf("after request %d: usage %+v, want %+v", i, u, spent)
		}
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream called %d times, want 2", n)
	}
	if ev := rec.all()[2]; ev.Status != 403 || !strings.Contains(ev.Refused, "budget") {
		t.Errorf("audit of the refusal: %+v", ev)
	}
}

func TestGatewayHostile(t *testing.T) {
	slow := make(chan struct{})
	hanging := make(chan struct{}, 16)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			hanging <- struct{}{}
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		case "/big":
			w.Header().Set("Content-Type", "application/octet-stream")
			buf := make([]byte, 64<<10)
			for i := 0; i < 64; i++ {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, "{}")
		}
	})
	t.Cleanup(func() { close(slow) }) // before the upstream's Close (cleanups run last first)
	var rec events
	g, base := startGateway(t, Config{RootCAs: up.pool, Record: rec.add, MaxRequestBytes: 1 << 10, MaxResponseBytes: 256 << 10,
		HeaderTimeout: 300 * time.Millisecond,
		Routes:        []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
	hdr := map[string]string{"x-api-key": g.PlaceholderFor("anthropic")}

	t.Run("unknown provider", func(t *testing.T) {
		resp, body := post(t, base+"/openai/v1/chat", hdr, "{}")
		if resp.StatusCode != 404 || !strings.Contains(body, "/anthropic") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("oversize body, declared", func(t *testing.T) {
		before := up.calls.Load()
		resp, _ := post(t, base+"/anthropic/v1/messages", hdr, strings.Repeat("x", 2<<10))
		if resp.StatusCode != 413 || up.calls.Load() != before {
			t.Fatalf("%d, upstream calls %d→%d", resp.StatusCode, before, up.calls.Load())
		}
	})
	t.Run("oversize body, chunked", func(t *testing.T) {
		req, _ := http.NewRequest("POST", base+"/anthropic/v1/messages", io.MultiReader(strings.NewReader(strings.Repeat("x", 4<<10))))
		req.ContentLength = -1
		req.Header.Set("x-api-key", g.PlaceholderFor("anthropic"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 && resp.StatusCode != 502 {
			t.Fatalf("status %d, want 413", resp.StatusCode)
		}
	})
	t.Run("upstream that never answers", func(t *testing.T) {
		start := time.Now()
		resp, body := post(t, base+"/anthropic/hang", hdr, "{}")
		<-hanging
		if resp.StatusCode != 502 || time.Since(start) > 5*time.Second {
			t.Fatalf("%d after %v: %s", resp.StatusCode, time.Since(start), body)
		}
		evs := rec.all()
		if ev := evs[len(evs)-1]; ev.UpstreamError == "" {
			t.Errorf("no upstream error in %+v", ev)
		}
	})
	t.Run("oversize response is cut", func(t *testing.T) {
		req, _ := http.NewRequest("POST", base+"/anthropic/big", strings.NewReader("{}"))
		req.Header.Set("x-api-key", g.PlaceholderFor("anthropic"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n > 256<<10 {
			t.Fatalf("client read %d bytes, over the 256 KiB bound", n)
		}
	})
	t.Run("in flight bound", func(t *testing.T) {
		g2, base2 := startGateway(t, Config{RootCAs: up.pool, MaxConcurrent: 1, HeaderTimeout: 2 * time.Second,
			Routes: []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
		h2 := map[string]string{"x-api-key": g2.PlaceholderFor("anthropic")}
		done := make(chan struct{})
		go func() { defer close(done); post(t, base2+"/anthropic/hang", h2, "{}") }()
		<-hanging
		if resp, body := post(t, base2+"/anthropic/v1/messages", h2, "{}"); resp.StatusCode != 429 || !strings.Contains(body, "in flight") {
			t.Fatalf("a second request in flight: %d %s", resp.StatusCode, body)
		}
		<-done
	})
}

// TestGatewayBadCertificate: an upstream whose certificate the host does
// not trust is never sent the key.
func TestGatewayBadCertificate(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") })
	var rec events
	g, base := startGateway(t, Config{RootCAs: x509.NewCertPool(), Record: rec.add,
		Routes: []Route{{Provider: anthropic(t), Upstream: up.url(t, ""), Key: realKey}}})
	resp, body := post(t, base+"/anthropic/v1/messages", map[string]string{"x-api-key": g.PlaceholderFor("anthropic")}, "{}")
	if resp.StatusCode != 502 || !strings.Contains(body, "certificate") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if up.calls.Load() != 0 {
		t.Fatal("the upstream with an untrusted certificate got the request")
	}
	if ev := rec.all()[0]; !strings.Contains(ev.UpstreamError, "certificate") {
		t.Errorf("audit %+v", ev)
	}
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"https://api.example.com", ""},
		{"https://gw.example.com:8443/anthropic/", ""},
		{"http://127.0.0.1:8080", ""},
		{"http://[::1]:8080", ""},
		{"http://10.0.0.1:8080", "plain http only to the loopback"},
		{"http://api.example.com", "plain http only to the loopback"},
		{"ftp://x", "want https"},
		{"https://user:pw@x", "no user"},
		{"https://x/?q=1", "no user, query"},
		{"x", "want https://HOST"},
	} {
		_, err := ParseUpstream(tc.in)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseUpstream(%q) = %v, want %q", tc.in, err, tc.err)
		}
	}
}

// waitUsage returns g's usage once it is want, or after 5 s: the gateway
// accounts a response once it has passed all of it on, which is after
// the client may have read it.
func waitUsage(g *Gateway, want Usage) Usage {
	deadline := time.Now().Add(5 * time.Second)
	for g.Usage() != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return g.Usage()
}
