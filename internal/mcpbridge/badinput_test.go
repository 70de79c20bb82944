package mcpbridge_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAccessChecks sends hostile or malformed requests; each gets its status
// and message, and a control session keeps working afterwards.
func TestAccessChecks(t *testing.T) {
	h := newHarness(t, harnessOpts{maxBody: 64 << 10})
	control := h.open("2025-06-18")
	v0326 := h.open("2025-03-26")

	cases := []struct {
		name    string
		sid     string
		body    string
		hdr     []string
		status  int
		message string
		header  string // a response header that must be set
	}{
		{"missing token", "", fmt.Sprintf(initBody, "2025-06-18"), []string{"Authorization", ""}, 401, "missing or wrong bearer token", "WWW-Authenticate"},
		{"wrong token", "", fmt.Sprintf(initBody, "2025-06-18"), []string{"Authorization", "Bearer " + strings.Repeat("cd", 32)}, 401, "missing or wrong bearer token", "WWW-Authenticate"},
		{"wrong scheme", "", fmt.Sprintf(initBody, "2025-06-18"), []string{"Authorization", "Basic " + strings.Repeat("ab", 32)}, 401, "bearer token", "WWW-Authenticate"},
		{"evil host", "", fmt.Sprintf(initBody, "2025-06-18"), []string{"Host", "evil.example:80"}, 403, "DNS rebinding", ""},
		{"evil origin", "", fmt.Sprintf(initBody, "2025-06-18"), []string{"Origin", "https://evil.example"}, 403, "not a loopback origin", ""},
		{"unsupported revision", control, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, []string{"Mcp-Protocol-Version", "1999-01-01"}, 400, "unsupported Mcp-Protocol-Version", ""},
		{"missing session", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil, 400, "missing Mcp-Session-Id", ""},
		{"unknown session", "0123456789abcdef0123456789abcdef", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil, 404, "unknown or expired session", ""},
		{"malformed json", control, `{"jsonrpc":"2.0","id":1,"method":`, nil, 400, "malformed JSON-RPC", ""},
		{"not json-rpc", control, `{"hello":"world"}`, nil, 400, "jsonrpc", ""},
		{"oversize body", control, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 70<<10) + `"}}}`, nil, 413, "exceeds 65536 bytes", ""},
		{"batch forbidden in 2025-06-18", control, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, nil, 400, "batches are not allowed", ""},
		{"wrong content type", control, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, []string{"Content-Type", "text/plain"}, 415, "application/json", ""},
		{"re-initialize", control, fmt.Sprintf(initBody, "2025-06-18"), nil, 400, "already initialized", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.post(c.sid, c.body, c.hdr...)
			if r.Status != c.status || !strings.Contains(string(r.Body), c.message) {
				t.Fatalf("got %d %s, want %d with %q", r.Status, r.Body, c.status, c.message)
			}
			if c.header != "" && r.Header.Get(c.header) == "" {
				t.Fatalf("response lacks %s header", c.header)
			}
			h.mustEcho(control)
		})
	}

	t.Run("batch allowed in 2025-03-26", func(t *testing.T) {
		r := h.post(v0326, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`)
		if r.Status != 200 || r.response(1) == nil || r.response(2) == nil {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("ready", func(t *testing.T) {
		req, _ := http.NewRequest("GET", h.Base+"/ready", nil)
		if r := h.do(req); r.Status != 401 {
			t.Fatalf("unauthenticated /ready: %d", r.Status)
		}
		req.Header.Set("Authorization", "Bearer "+h.Token)
		if r := h.do(req); r.Status != 200 {
			t.Fatalf("/ready: %d", r.Status)
		}
		h.Front.SetDraining(true)
		if r := h.do(req); r.Status != 503 {
			t.Fatalf("/ready while draining: %d", r.Status)
		}
		h.Front.SetDraining(false)
	})
	t.Run("second GET stream", func(t *testing.T) {
		get := func() (*http.Response, error) {
			req, _ := http.NewRequest("GET", h.URL, nil)
			req.Header.Set("Authorization", "Bearer "+h.Token)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", control)
			return http.DefaultClient.Do(req)
		}
		first, err := get()
		if err != nil || first.StatusCode != 200 {
			t.Fatalf("first GET: %v %v", err, first)
		}
		defer first.Body.Close()
		second, err := get()
		if err != nil {
			t.Fatal(err)
		}
		second.Body.Close()
		if second.StatusCode != http.StatusConflict {
			t.Fatalf("second GET: %d, want 409", second.StatusCode)
		}
		h.mustEcho(control)
	})
	t.Run("oversize headers", func(t *testing.T) {
		r := h.post(control, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "X-Junk", strings.Repeat("j", 24<<10))
		if r.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("got %d, want 431", r.Status)
		}
		h.mustEcho(control)
	})
}

// TestSlowHeaders checks that a client sending headers slowly is cut off
// after ReadTimeout and does not disturb others.
func TestSlowHeaders(t *testing.T) {
	h := newHarness(t, harnessOpts{readTimeout: 300 * time.Millisecond})
	control := h.open("2025-11-25")
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\n", strings.TrimPrefix(h.Base, "http://"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	// Never finish the headers: the server must close the connection.
	buf := make([]byte, 512)
	_, err = bufio.NewReader(conn).Read(buf)
	if err == nil {
		// Go answers a timed-out request with nothing or a 408; either way
		// the connection must end soon after.
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("slow client held the connection for %s", el)
	}
	h.mustEcho(control)
}

// TestSessionCap fills the session limit with busy sessions (a GET stream
// open on each), checks the 503, and that DELETE frees a slot.
func TestSessionCap(t *testing.T) {
	h := newHarness(t, harnessOpts{maxSessions: 2})
	var sids []string
	for range 2 {
		sid := h.open("2025-06-18")
		sids = append(sids, sid)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
		req.Header.Set("Authorization", "Bearer "+h.Token)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := h.client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			cancel()
			t.Fatalf("GET stream: %v %v", resp, err)
		}
		t.Cleanup(func() { cancel(); resp.Body.Close() })
	}
	r := h.post("", fmt.Sprintf(initBody, "2025-06-18"))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "allows 2 live sessions") {
		t.Fatalf("third session: %d %v %s", r.Status, r.Header, r.Body)
	}
	if !strings.Contains(h.Logs.String(), "limit hit") {
		t.Fatal("no limit record in the log")
	}
	a := sids[0]
	h.mustEcho(a)
	if st := h.delete(a); st != 204 {
		t.Fatalf("DELETE: %d", st)
	}
	h.open("2025-06-18")
}

// TestChildCrashMidCall: every in-flight request gets an error within 1 s,
// the session ends and the next request gets 404.
func TestChildCrashMidCall(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--crash-on-call", "--hang-tool"}})
	control := h.open("2025-11-25")
	sid := h.open("2025-11-25")
	hung := make(chan *rpcResult, 1)
	go func() {
		hung <- h.post(sid, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"hang","arguments":{}}}`)
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	r := h.post(sid, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"crash","arguments":{}}}`)
	if m := r.response(6); m == nil || m["error"] == nil || !strings.Contains(string(r.Body), "exited") {
		t.Fatalf("crashing call: %d %s", r.Status, r.Body)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("error after %s, want < 1s", el)
	}
	select {
	case r := <-hung:
		if m := r.response(5); m == nil || m["error"] == nil {
			t.Fatalf("in-flight call: %d %s", r.Status, r.Body)
		}
	case <-time.After(time.Second):
		t.Fatal("in-flight call not failed within 1s")
	}
	if r := h.echo(sid, 7, "x"); r.Status != 404 {
		t.Fatalf("after crash: %d, want 404", r.Status)
	}
	if !strings.Contains(string(r.Body), "exit status 7") {
		t.Fatalf("error does not say how the child ended: %s", r.Body)
	}
	waitFor(t, 5*time.Second, "child exit record", func() bool {
		return strings.Contains(h.Logs.String(), `msg="child exit"`) && strings.Contains(h.Logs.String(), "exit status 7")
	})
	h.mustEcho(control)
}

// TestChildNeverStarts: a missing binary or a child that exits before
// answering initialize gives an error within 1 s, and no session.
func TestChildNeverStarts(t *testing.T) {
	for _, c := range []struct {
		name string
		argv []string
		want string
	}{
		{"missing binary", []string{"/nonexistent/mcp-server"}, "cannot start the MCP server"},
		{"exits before initialize", []string{echoBin, "--exit-before-init"}, "exit status 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{argv: c.argv})
			r := h.post("", fmt.Sprintf(initBody, "2025-11-25"))
			if r.Status != http.StatusBadGateway || !strings.Contains(string(r.Body), c.want) {
				t.Fatalf("got %d %s, want 502 with %q", r.Status, r.Body, c.want)
			}
			if r.Header.Get("Mcp-Session-Id") != "" {
				t.Fatal("a session id was handed out for a failed start")
			}
			if r.Elapsed > time.Second {
				t.Fatalf("answered after %s, want < 1s", r.Elapsed)
			}
			waitFor(t, 5*time.Second, "no sessions", func() bool { return h.Bridge.Stats().Sessions == 0 })
		})
	}
}

// TestChildStderrFlood: a child flooding stderr is rate-limited in the log
// and still serves.
func TestChildStderrFlood(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--stderr-flood", "20000"}})
	sid := h.open("2025-11-25")
	h.mustEcho(sid)
	waitFor(t, 5*time.Second, "suppression record", func() bool { return strings.Contains(h.Logs.String(), "child stderr rate-limited") })
	if n := strings.Count(h.Logs.String(), `msg="child stderr"`); n > 1000 {
		t.Fatalf("%d stderr lines reached the log; rate limit not applied", n)
	}
}

// TestChildGarbage: non-JSON lines on stdout are dropped and logged.
func TestChildGarbage(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--garbage"}})
	sid := h.open("2025-11-25")
	for i := range 5 {
		if r := h.echo(sid, i+1, "ok"); r.response(float64(i+1)) == nil {
			t.Fatalf("call %d: %d %s", i, r.Status, r.Body)
		}
	}
	if !strings.Contains(h.Logs.String(), "non-JSON-RPC line") {
		t.Fatal("garbage not logged")
	}
}

// TestDeleteKillsWholeGroup: the child's own children die with the session.
func TestDeleteKillsWholeGroup(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--spawn-grandchild"}})
	base := descendants()
	sid := h.open("2025-11-25")
	waitFor(t, 5*time.Second, "child and grandchild", func() bool { return descendants() >= base+2 })
	if st := h.delete(sid); st != 204 {
		t.Fatalf("DELETE: %d", st)
	}
	waitFor(t, 5*time.Second, "group gone", func() bool { return descendants() == base })
	if r := h.echo(sid, 1, "x"); r.Status != 404 {
		t.Fatalf("after DELETE: %d", r.Status)
	}
}

// TestIdleExpiry: idle sessions end, active ones do not.
func TestIdleExpiry(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--hang-tool"}, idle: 300 * time.Millisecond, call: 2 * time.Second})
	idle := h.open("2025-11-25")
	busy := h.open("2025-11-25")
	done := make(chan *rpcResult, 1)
	go func() {
		done <- h.post(busy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang","arguments":{}}}`)
	}()
	time.Sleep(900 * time.Millisecond)
	if r := h.echo(idle, 1, "x"); r.Status != 404 {
		t.Fatalf("idle session: %d, want 404", r.Status)
	}
	r := <-done // the call times out after 2 s; the session lived through it
	if m := r.response(1); m == nil || !strings.Contains(string(r.Body), "did not answer within") {
		t.Fatalf("hung call: %d %s", r.Status, r.Body)
	}
	if !strings.Contains(h.Logs.String(), "call_timeout") {
		t.Fatal("no call timeout record")
	}
}

// TestDrain: /ready goes 503 and new sessions get 503 while in-flight calls
// finish.
func TestDrain(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--progress"}})
	sid := h.open("2025-11-25")
	res := make(chan *rpcResult, 1)
	go func() {
		res <- h.post(sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{},"_meta":{"progressToken":"p"}}}`)
	}()
	time.Sleep(10 * time.Millisecond)
	go h.stop()
	waitFor(t, 2*time.Second, "draining", func() bool { return h.Bridge.Draining() })
	r := <-res
	if m := r.response(3); m == nil || m["result"] == nil {
		t.Fatalf("in-flight call during drain: %d %s", r.Status, r.Body)
	}
}
