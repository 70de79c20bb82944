package validate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/top"
	"github.com/soda-project/soda/test/testkit"
)

// httpWorker is a soda-validated --transport http serving kind (conf
// written as KIND.conf) with its owner directories under state.
type httpWorker struct {
	cmd       *exec.Cmd
	addr, tok string
	url       string
	stderr    *testkit.Buffer
}

// startHTTP starts it on a free loopback port and waits for its token and
// listener; it is killed when t ends.
func startHTTP(t testing.TB, state, kind, conf string, extra ...string) *httpWorker {
	t.Helper()
	return startHTTPEnv(t, state, kind, conf, nil, extra...)
}

// startHTTPEnv is startHTTP with more environment for the worker.
func startHTTPEnv(t testing.TB, state, kind, conf string, env []string, extra ...string) *httpWorker {
	t.Helper()
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, kind+".conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"--config-dir", confDir, "--state-dir", state, "--allow-degraded", "cgroup", "--transport", "http", "--listen", addr}, extra...)
	w := &httpWorker{cmd: exec.Command(filepath.Join(bin, "soda-validated"), append(args, kind)...), addr: addr, url: "http://" + addr + "/mcp", stderr: &testkit.Buffer{}}
	w.cmd.Stderr = w.stderr
	if env != nil {
		w.cmd.Env = append(os.Environ(), env...)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); w.tok == ""; {
		if b, err := os.ReadFile(filepath.Join(state, kind, "token")); err == nil && len(strings.TrimSpace(string(b))) == 64 {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				w.tok = strings.TrimSpace(string(b))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("soda-validated: no token or listener after 10 s\n%s", w.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return w
}

// connect is an MCP client session with the worker's token.
func (w *httpWorker) connect(t testing.TB) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: w.url, HTTPClient: &http.Client{Transport: testkit.Bearer{Token: w.tok}}}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	return cs
}

// TestHTTP: the worker over Streamable HTTP behind the listener's bounds,
// each with its status code; a whole validation with the go-sdk client.
func TestHTTP(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "shellcheck", shellcheckConf)
	addr, tok, url := w.addr, w.tok, w.url
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", w.stderr.String())
		}
	})
	do := func(method, path string, hdr map[string]string, body []byte) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	auth := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range auth {
			m[a] = b
		}
		m[k] = v
		return m
	}
	init := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	for _, c := range []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		body   []byte
		want   int
	}{
		{"no token", "POST", "/mcp", map[string]string{"Content-Type": "application/json"}, init, 401},
		{"wrong token", "POST", "/mcp", with("Authorization", "Bearer "+strings.Repeat("0", 64)), init, 401},
		{"no token on ready", "GET", "/ready", nil, nil, 401},
		{"ready", "GET", "/ready", auth, nil, 200},
		{"foreign Host", "POST", "/mcp", with("Host", "evil.example:80"), init, 403},
		{"localhost, not the exact address", "POST", "/mcp", with("Host", "localhost:"+strings.Split(addr, ":")[1]), init, 403},
		{"an Origin, even loopback", "POST", "/mcp", with("Origin", "http://127.0.0.1"), init, 403},
		{"body over 2 MiB", "POST", "/mcp", auth, bytes.Repeat([]byte(" "), 2<<20+1), 413},
		{"headers over 16 KiB", "POST", "/mcp", with("X-Pad", strings.Repeat("a", 17<<10)), init, 431},
	} {
		if got := do(c.method, c.path, c.hdr, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := w.connect(t)
	defer cs.Close()
	v, text, isErr := validate(t, cs, [2]string{"a.sh", "#!/bin/bash\necho $1\n"})
	if isErr || v.Verdict == nil || *v.Verdict != "invalid" || len(v.Diagnostics) == 0 {
		t.Errorf("validate over HTTP: %+v\n%s", v, text)
	}
	// At most 8 sessions: the 9th initialize is refused.
	var extra []*mcp.ClientSession
	refused := false
	for i := 0; i < 9 && !refused; i++ {
		s, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprint("t", i), Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: testkit.Bearer{Token: tok}}}, nil)
		if err != nil {
			refused = strings.Contains(err.Error(), "503") || strings.Contains(err.Error(), "Service Unavailable") || strings.Contains(err.Error(), "sessions are open")
			if !refused {
				t.Errorf("session %d: %v", i+2, err)
			}
			break
		}
		extra = append(extra, s)
	}
	if !refused || len(extra) != 7 {
		t.Errorf("sessions: %d more admitted after the first, refused %v; want 7 more and the 9th refused", len(extra), refused)
	}
	for _, s := range extra {
		s.Close()
	}

	// GET /metrics: 401 without the token; with it, what happened above.
	if got := do("GET", "/metrics", nil, nil); got != 401 {
		t.Errorf("GET /metrics without the token: %d, want 401", got)
	}
	sample := top.Read(context.Background(), http.DefaultClient, []top.Source{{Name: "shellcheck", URL: "http://" + addr + "/metrics", Token: tok}})
	fams := sample.Fams[0]
	if fams == nil {
		t.Fatalf("scrape /metrics: %v", sample.Errs[0])
	}
	for _, c := range []struct {
		name, label, val string
		want             float64
	}{
		{"soda_validate_calls_total", "status", "invalid", 1},
		{"soda_http_refused_total", "reason", "auth", 4}, // the three above and the scrape without a token
		{"soda_http_refused_total", "reason", "host", 2},
		{"soda_http_refused_total", "reason", "origin", 1},
		{"soda_limit_hits_total", "limit", "headers", 1},
	} {
		if got := fams.Sum(c.name, c.label, c.val); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.val, got, c.want)
		}
	}
	if h := fams["soda_validate_call_duration_seconds"].GetMetric(); len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("soda_validate_call_duration_seconds: %v, want one observation", h)
	}
}

// TestReadyPoisonedAndKilled: /ready in each state (401 without the
// token, 503 while the worker is poisoned, 200 otherwise), a poisoned
// worker refuses work across restarts until --reconcile; kill -9 of the
// worker mid-call leaves no sandbox process, and the next start removes
// what it left and serves.
func TestReadyPoisonedAndKilled(t *testing.T) {
	requireSandbox(t)
	state := t.TempDir()
	conf := "[Validator]\nExecStart=/bin/sh -c \"sleep 30; exit 0\" %FILES%\nFiles=*.sh\n"
	start := func() (*exec.Cmd, string, string) {
		t.Helper()
		w := startHTTP(t, state, "slow", conf)
		return w.cmd, w.addr, w.tok
	}
	ready := func(addr, tok string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/ready", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cmd, addr, tok := start()
	if c := ready(addr, ""); c != 401 {
		t.Errorf("/ready without the token: %d, want 401", c)
	}
	if c := ready(addr, tok); c != 200 {
		t.Errorf("/ready: %d, want 200", c)
	}
	// kill -9 mid-call.
	cs := (&httpWorker{url: "http://" + addr + "/mcp", tok: tok}).connect(t)
	go func() {
		_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": []any{map[string]any{"path": "a.sh", "content": "true\n"}}}})
	}()
	// Mid-call: the validator (sleep) runs in the call's sandbox.
	var inits []int
	for deadline := time.Now().Add(10 * time.Second); ; {
		inits = testkit.Inits(cmd.Process.Pid)
		running := false
		for _, p := range inits {
			for _, d := range testkit.Descendants(p) {
				if testkit.Comm(d) == "sleep" {
					running = true
				}
			}
		}
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call's validator did not start: inits %v", inits)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var all []int
	for _, p := range inits {
		all = append(all, p)
		all = append(all, testkit.Descendants(p)...)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; {
		alive := 0
		for _, p := range all {
			if testkit.Alive(p) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of the sandboxes alive 10 s after kill -9 of the worker", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Poisoned (as a failed clean-up records it): refused across a
	// restart, /ready 503, until --reconcile.
	rec := filepath.Join(state, "slow", "owner.json")
	data, _ := os.ReadFile(rec)
	data = []byte(strings.Replace(string(data), `"kind"`, `"poisoned": "clean-up of sandbox x failed", "kind"`, 1))
	if err := os.WriteFile(rec, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr, tok = start()
	if c := ready(addr, tok); c != 503 {
		t.Errorf("/ready while poisoned: %d, want 503", c)
	}
	cs2 := (&httpWorker{url: "http://" + addr + "/mcp", tok: tok}).connect(t)
	defer cs2.Close()
	if _, text, isErr := validate(t, cs2, [2]string{"a.sh", "true\n"}); !isErr || !strings.Contains(text, "poisoned") {
		t.Errorf("a poisoned worker: %s", text)
	}
	if tmp, _ := os.ReadDir(filepath.Join(state, "slow", "tmp")); len(tmp) > 1 { // its own spare's home at most
		t.Errorf("the killed worker's homes were not removed: %d entries", len(tmp))
	}
}

// TestHTTPSessions: DELETE of the session during a run retires it (the
// worker is free long before the validator would have ended); a bare
// disconnect leaves the work to run on (the worker stays busy); a session
// gets one GET stream; a connection that sends no complete headers within
// 10 s is closed.
func TestHTTPSessions(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "slow", "[Validator]\nExecStart=/bin/sh -c \"sleep 6; exit 0\" %FILES%\nFiles=*.sh\n")
	cmd, addr, tok, url := w.cmd, w.addr, w.tok, w.url
	connect := func() *mcp.ClientSession { return w.connect(t) }
	// busy: the validator (sleep) runs in a sandbox of the worker.
	busy := func() bool {
		for _, p := range testkit.Descendants(cmd.Process.Pid) {
			if testkit.Comm(p) == "sleep" {
				return true
			}
		}
		return false
	}
	run := func(cs *mcp.ClientSession) {
		go func() {
			_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": []any{map[string]any{"path": "a.sh", "content": "true\n"}}}})
		}()
		for deadline := time.Now().Add(5 * time.Second); !busy(); {
			if time.Now().After(deadline) {
				t.Fatal("the run never made the worker busy")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// DELETE (the client closing its session) retires the run.
	cs := connect()
	run(cs)
	t0 := time.Now()
	del, _ := http.NewRequest("DELETE", url, nil)
	del.Header.Set("Authorization", "Bearer "+tok)
	del.Header.Set("Mcp-Session-Id", cs.ID())
	go func() { // go-sdk answers the DELETE once the session's calls are done
		if r, err := http.DefaultClient.Do(del); err == nil {
			r.Body.Close()
		}
	}()
	for busy() {
		if time.Since(t0) > 4*time.Second {
			t.Fatal("still busy 4 s after the session's DELETE: the run was not retired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("free %s after the session's DELETE", time.Since(t0).Round(time.Millisecond))

	// A bare disconnect: a raw tools/call whose connection is closed.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	post := func(sid, body string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		return (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	}
	resp, err := post("", init)
	if err != nil {
		t.Fatal(err)
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	if r, err := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err == nil {
		r.Body.Close()
	}
	// GET streams: one per session.
	get := func() int {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t.Cleanup(cancel)
		r, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			return -1
		}
		return r.StatusCode
	}
	if a, b := get(), get(); a != 200 || b == 200 {
		t.Errorf("GET streams of one session: %d then %d, want 200 then a refusal", a, b)
	}
	// The worker stays taken until the DELETEd run's sandbox is gone,
	// which may be a little after its sleep: a call made in between is
	// refused as busy at once, and is made again.
	for id, deadline := 2, time.Now().Add(10*time.Second); !busy(); id++ {
		if time.Now().After(deadline) {
			t.Fatal("the raw call never made the worker busy")
		}
		go func() {
			if r, err := post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"validate","arguments":{"files":[{"path":"a.sh","content":"true\n"}]}}}`, id)); err == nil {
				r.Body.Close() // the bare disconnect: the response is never read
			}
		}()
		for wait := time.Now().Add(time.Second); time.Now().Before(wait) && !busy(); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	t1 := time.Now()
	time.Sleep(2 * time.Second)
	if !busy() {
		t.Errorf("a bare disconnect retired the run (free %s after)", time.Since(t1))
	}

	// Headers never completed: closed within 10 s (and a bit).
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\n", addr)
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	t2 := time.Now()
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	if d := time.Since(t2); d > 20*time.Second || d < 9*time.Second { // 10 s, and a loaded machine
		t.Errorf("a connection that never finished its headers was closed after %s, want about 10 s", d)
	}
}

// TestBodyReaders: at most 16 requests send their bodies at once; the 17th
// is refused with 503.
func TestBodyReaders(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "shellcheck", shellcheckConf)
	addr, tok := w.addr, w.tok
	// 16 slow senders: headers, then a body that never finishes.
	var slow []net.Conn
	t0 := time.Now()
	for i := 0; i < 16; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		slow = append(slow, c)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{", addr, tok)
	}
	time.Sleep(300 * time.Millisecond)
	req, _ := http.NewRequest("POST", "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a 17th request while 16 send their bodies: %d, want 503", resp.StatusCode)
	}
	// A body not sent within 10 s is cut and answered 408 (a timeout, not
	// a body too large).
	_ = slow[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(slow[0]).ReadString('\n')
	if d := time.Since(t0); err != nil || !strings.HasPrefix(line, "HTTP/1.1 408") || d < 9*time.Second {
		t.Errorf("a body still unsent after 10 s: %q %v after %s, want 408 after about 10 s", line, err, d)
	}
}

// TestHTTPMalformedUnicode: a POST body is checked on its raw bytes before
// the SDK decodes it: a lone surrogate escape or a raw 0xFF in a call's
// content (which encoding/json would turn into U+FFFD, validated and
// attested) is answered 400 with a JSON-RPC parse error, and nothing
// runs; the session goes on.
func TestHTTPMalformedUnicode(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "sh", "[Validator]\nExecStart=/bin/sh -c \"exit 0\" %FILES%\nFiles=*.sh\n")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", w.stderr.String())
		}
	})
	post := func(sid, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", w.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+w.tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if sid == "" {
			return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
		}
		return resp.StatusCode, string(b)
	}
	code, sid := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", code, sid)
	}
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := func(content string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"validate","arguments":{"files":[{"path":"a.sh","content":"` + content + `"}]}}}`
	}
	for _, c := range []struct{ name, body string }{
		{"a lone high surrogate", call(`echo \ud800`)},
		{"a lone low surrogate", call(`echo \udfff`)},
		{"a raw 0xFF", call("echo \xff")},
		{"not JSON", `{"jsonrpc":`},
	} {
		code, body := post(sid, c.body)
		var resp rpcResponse
		if err := json.Unmarshal([]byte(body), &resp); code != 400 || err != nil || resp.Error == nil || resp.Error.Code != -32700 || resp.Result != nil {
			t.Errorf("%s: %d %.300s, want 400 with a JSON-RPC parse error", c.name, code, body)
		}
	}
	// Nothing ran: no call was counted.
	sample := top.Read(context.Background(), http.DefaultClient, []top.Source{{Name: "sh", URL: "http://" + w.addr + "/metrics", Token: w.tok}})
	if fams := sample.Fams[0]; fams == nil || fams.Sum("soda_validate_calls_total", "status", "valid") != 0 {
		t.Errorf("a malformed body was validated: %v %v", sample.Errs, fams)
	}
	// The session goes on: a good call with a surrogate pair is valid.
	if code, body := post(sid, call(`echo \ud83d\ude00`)); code != 200 || !strings.Contains(body, `\"verdict\":\"valid\"`) && !strings.Contains(body, `"verdict":"valid"`) {
		t.Errorf("a good call after the malformed ones: %d %.400s", code, body)
	}
}

// rawPost posts body to the worker's /mcp (with sid when not empty) and
// returns the status, the session id it gave and the body.
func (w *httpWorker) rawPost(t testing.TB, sid, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", w.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+w.tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

const rawInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestSessionCapConcurrent: 16 initialize requests at once admit exactly
// 8 sessions (a slot is reserved before the SDK sees the request, counting
// sessions still initializing), the others get 503; once the 8 are
// deleted, 8 more are admitted. Three rounds.
func TestSessionCapConcurrent(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "sh", "[Validator]\nExecStart=/bin/sh -c \"exit 0\" %FILES%\nFiles=*.sh\n")
	for round := range 3 {
		var mu sync.Mutex
		var sids []string
		refused := 0
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				code, sid, body := w.rawPost(t, "", rawInit)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case code == 200 && sid != "":
					sids = append(sids, sid)
				case code == 503:
					refused++
				default:
					t.Errorf("an initialize: %d %q", code, body)
				}
			}()
		}
		close(gate)
		wg.Wait()
		if len(sids) != 8 || refused != 8 {
			t.Errorf("round %d: 16 concurrent initialize requests admitted %d sessions and refused %d; want 8 and 8", round, len(sids), refused)
		}
		for _, sid := range sids {
			req, _ := http.NewRequest("DELETE", w.url, nil)
			req.Header.Set("Authorization", "Bearer "+w.tok)
			req.Header.Set("Mcp-Session-Id", sid)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
}

// TestSessionIdleExpiry: with --session-idle 2s (15 min by default), a
// session unused for longer is gone (404) and its slot is free again; a
// call that runs longer than the idle time does not expire its session.
func TestSessionIdleExpiry(t *testing.T) {
	requireSandbox(t)
	w := startHTTP(t, t.TempDir(), "slow", "[Validator]\nExecStart=/bin/sh -c \"sleep 4; exit 0\" %FILES%\nFiles=*.sh\n", "--session-idle", "2s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", w.stderr.String())
		}
	})
	var sids []string
	for i := range 8 {
		code, sid, body := w.rawPost(t, "", rawInit)
		if code != 200 || sid == "" {
			t.Fatalf("initialize %d: %d %s", i, code, body)
		}
		sids = append(sids, sid)
	}
	if code, _, _ := w.rawPost(t, "", rawInit); code != 503 {
		t.Fatalf("a 9th session: %d, want 503", code)
	}
	// One session works through a call of 4 s, twice the idle time.
	busy := sids[0]
	w.rawPost(t, busy, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	code, _, body := w.rawPost(t, busy, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"validate","arguments":{"files":[{"path":"a.sh","content":"true\n"}]}}}`)
	if code != 200 || !strings.Contains(body, `"verdict":"valid"`) {
		t.Fatalf("a call of 4 s: %d %.300s", code, body)
	}
	if code, _, body := w.rawPost(t, busy, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); code != 200 {
		t.Errorf("the session that ran a call longer than the idle time: %d %s, want it alive", code, body)
	}
	// The others were idle for 4 s: gone.
	for _, sid := range sids[1:] {
		if code, _, _ := w.rawPost(t, sid, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); code != 404 {
			t.Errorf("a session idle for 4 s with --session-idle 2s: %d, want 404", code)
		}
	}
	// Their slots are free: 7 more sessions are admitted, the 9th not.
	for i := range 7 {
		if code, _, body := w.rawPost(t, "", rawInit); code != 200 {
			t.Fatalf("initialize %d after the idle ones expired: %d %s", i, code, body)
		}
	}
	if code, _, _ := w.rawPost(t, "", rawInit); code != 503 {
		t.Errorf("a 9th session: %d, want 503", code)
	}
}

// TestNotifyReadyAndWatchdog: under a service manager (a NOTIFY_SOCKET of
// the test's own, WATCHDOG_USEC=1s) the worker reports READY=1 only once
// its recovery is done (what a killed predecessor left is removed, the
// first call's sandbox has started) and it serves; then WATCHDOG=1 every
// half interval; STOPPING=1 when it is stopped.
func TestNotifyReadyAndWatchdog(t *testing.T) {
	requireSandbox(t)
	state := t.TempDir()
	conf := "[Validator]\nExecStart=/bin/sh -c \"exit 0\" %FILES%\nFiles=*.sh\n"
	// A first start makes the owner directory; then a predecessor's home.
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "sh.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	first := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", confDir, "--state-dir", state, "--allow-degraded", "cgroup", "sh")
	if out, err := first.CombinedOutput(); err != nil {
		t.Fatalf("first start: %v\n%s", err, out)
	}
	leftover := filepath.Join(state, "sh", "tmp", "soda-session-home-predecessor")
	if err := os.MkdirAll(filepath.Join(leftover, "x"), 0o700); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type msg struct {
		text string
		at   time.Time
	}
	msgs := make(chan msg, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- msg{string(buf[:n]), time.Now()}
		}
	}()
	// Started by hand, not by startHTTP, to look at the state the moment
	// READY=1 comes.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", confDir, "--state-dir", state, "--allow-degraded", "cgroup", "--transport", "http", "--listen", addr, "sh")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=1000000")
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", stderr.String())
		}
	})
	next := func(what string) msg {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the notify socket closed before %s", what)
			}
			return m
		case <-time.After(15 * time.Second):
			t.Fatalf("no %s within 15 s", what)
		}
		return msg{}
	}
	m := next("READY=1")
	if !strings.Contains(m.text, "READY=1") {
		t.Fatalf("the first notification: %q, want READY=1", m.text)
	}
	// At READY=1: recovery done, the spare started, the listener serving.
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("READY=1 before the predecessor's home was removed (%v)", err)
	}
	if dirs := homeDirs(filepath.Join(state, "sh", "tmp")); len(dirs) != 1 {
		t.Errorf("READY=1 with homes %v in the owner directory, want the first call's sandbox's", dirs)
	}
	tok, _ := os.ReadFile(filepath.Join(state, "sh", "token"))
	req, _ := http.NewRequest("GET", "http://"+addr+"/ready", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /ready right after READY=1: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// WATCHDOG=1 at half of WATCHDOG_USEC.
	pings := 0
	for t0 := time.Now(); time.Since(t0) < 2200*time.Millisecond; {
		select {
		case m := <-msgs:
			if strings.Contains(m.text, "WATCHDOG=1") {
				pings++
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if pings < 3 || pings > 6 {
		t.Errorf("%d WATCHDOG=1 in 2.2 s with WATCHDOG_USEC=1s, want about 4", pings)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for {
		m := next("STOPPING=1")
		if strings.Contains(m.text, "STOPPING=1") {
			break
		}
	}
}

// homeDirs lists the sandbox homes in an owner directory: its
// directories (each home has a lock file beside it, home-X.lock, held
// while its sandbox lives).
func homeDirs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestHTTPTokenAndClientConfig: a worker run by hand (its own state
// directory and port) names in a 401 the command that prints its token,
// and "sodactl validate token" and "client-config" find its token and
// address in its owner record.
func TestHTTPTokenAndClientConfig(t *testing.T) {
	requireSandbox(t)
	state := t.TempDir()
	w := startHTTP(t, state, "shellcheck", shellcheckConf)
	resp, err := http.Get("http://" + w.addr + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hint := "sodactl validate token shellcheck --state-dir " + state
	if resp.StatusCode != 401 || !strings.Contains(string(body), hint) {
		t.Errorf("/ready without the token: %d %q, want 401 naming %q", resp.StatusCode, body, hint)
	}
	sodactl := func(args ...string) string {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(bin, "sodactl"), args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("sodactl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	if got := sodactl(strings.Fields(strings.TrimPrefix(hint, "sodactl "))...); strings.TrimSpace(got) != w.tok {
		t.Errorf("%s printed %q, want the worker's token", hint, got)
	}
	want := `claude mcp add --transport http validate-shellcheck ` + w.url + ` --header "Authorization: Bearer ` + w.tok + `"` + "\n"
	if got := sodactl("validate", "client-config", "shellcheck", "--state-dir", state, "--client", "claude"); got != want {
		t.Errorf("sodactl validate client-config:\n%q\nwant\n%q", got, want)
	}
}
