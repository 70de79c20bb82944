package mcpbridge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/httpfront"
	"github.com/soda-project/soda/internal/mcpbridge"
	"github.com/soda-project/soda/internal/metrics"
)

// echoBin is the mcpecho fixture, built once for all tests.
var echoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "soda-mcpbridge-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "mcpecho")
	out, err := exec.Command("go", "build", "-o", echoBin, "github.com/soda-project/soda/test/mcpecho").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build mcpecho: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// everythingCmd returns the command line of server-everything, installed by
// `npm ci` in test/node (the CI script and `make test` do it).
func everythingCmd(t testing.TB) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	js := filepath.Join(filepath.Dir(file), "..", "..", "test", "node", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(js); err != nil {
		t.Fatalf("server-everything is not installed (%v): run `npm ci --prefix test/node` (make test does)", err)
	}
	return []string{"node", js, "stdio"}
}

// logBuffer collects log output safely across goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// harness is a bridge behind the real front on a loopback port.
type harness struct {
	t      testing.TB
	URL    string
	Base   string
	Token  string
	Bridge *mcpbridge.Bridge
	Front  *httpfront.Front
	Logs   *logBuffer
	Placer cgroup.Placer
	// Metrics is the bridge's registry (harnessOpts.metrics; else nil).
	Metrics *metrics.Registry
	client  *http.Client
	stop    func()
}

type harnessOpts struct {
	argv        []string
	maxSessions int
	idle        time.Duration
	call        time.Duration
	start       time.Duration
	readTimeout time.Duration
	maxBody     int64
	maxConns    int
	noAuth      bool
	metrics     bool // record into a registry (metrics.NewBridge)
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.argv == nil {
		o.argv = []string{echoBin}
	}
	if o.maxSessions == 0 {
		o.maxSessions = 8
	}
	if o.idle == 0 {
		o.idle = time.Minute
	}
	if o.call == 0 {
		o.call = 30 * time.Second
	}
	if o.start == 0 {
		o.start = 10 * time.Second
	}
	if o.readTimeout == 0 {
		o.readTimeout = 10 * time.Second
	}
	if o.maxBody == 0 {
		o.maxBody = 4 << 20
	}
	if o.maxConns == 0 {
		o.maxConns = 32
	}
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	placer := cgroup.NewPlacer(log, "soda-test", cgroup.Limits{})
	var bm *metrics.Bridge
	var b *mcpbridge.Bridge
	var reg *metrics.Registry
	if o.metrics {
		reg = metrics.NewRegistry("test", "0")
		bm = metrics.NewBridge(reg, "test", func() (int, int) { st := b.Stats(); return st.Sessions, int(st.Children) })
	}
	b = mcpbridge.New(log, mcpbridge.Options{
		Metrics:      bm,
		Name:         "test",
		Spec:         child.Spec{Argv: o.argv},
		Placer:       placer,
		Grace:        child.Grace{AfterStdinClose: 500 * time.Millisecond, AfterTerm: 500 * time.Millisecond},
		MaxSessions:  o.maxSessions,
		IdleTimeout:  o.idle,
		CallTimeout:  o.call,
		StartTimeout: o.start,
		MaxBodyBytes: o.maxBody,
	})
	tok := strings.Repeat("ab", 32)
	if o.noAuth {
		tok = ""
	}
	f := httpfront.New(log, httpfront.Options{Name: "test", Token: tok, MaxConnections: o.maxConns, MaxHeaderBytes: 16 << 10, ReadTimeout: o.readTimeout, Metrics: bm.HTTP()}, b.Handler())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go b.Run(ctx)
	served := make(chan struct{})
	go func() { f.Serve(l); close(served) }()
	h := &harness{
		t: t, Base: "http://" + l.Addr().String(), Token: tok, Bridge: b, Front: f, Logs: logs, Placer: placer, Metrics: reg,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	h.URL = h.Base + "/mcp"
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			f.SetDraining(true)
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			b.Shutdown(sctx)
			// As soda-mcpd stops: the handlers finish what the end of
			// the sessions made them write (a stateless listen's last
			// result) before the connections close.
			if err := f.Shutdown(sctx); err != nil {
				f.Close()
			}
			cancel()
			<-served
			h.client.CloseIdleConnections()
		})
	}
	t.Cleanup(func() {
		h.stop()
		if t.Failed() {
			t.Logf("bridge log:\n%s", logs.String())
		}
	})
	return h
}

// rpcResult is a decoded HTTP answer of the bridge.
type rpcResult struct {
	Status  int
	Header  http.Header
	Body    []byte
	Msgs    []map[string]any // JSON-RPC messages, from JSON or SSE
	Elapsed time.Duration
}

func (r *rpcResult) response(id float64) map[string]any {
	for _, m := range r.Msgs {
		if v, ok := m["id"].(float64); ok && v == id {
			if _, isReq := m["method"]; !isReq {
				return m
			}
		}
	}
	return nil
}

// post sends body with the standard headers plus extra ones.
func (h *harness) post(sid, body string, hdr ...string) *rpcResult {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return h.do(req)
}

func (h *harness) do(req *http.Request) *rpcResult {
	h.t.Helper()
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := &rpcResult{Status: resp.StatusCode, Header: resp.Header, Body: body, Elapsed: time.Since(start)}
	r.Msgs = decodeMessages(resp.Header.Get("Content-Type"), body)
	return r
}

func decodeMessages(ct string, body []byte) []map[string]any {
	var out []map[string]any
	if strings.HasPrefix(ct, "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				out = append(out, decodeMessages("application/json", []byte(d))...)
			}
		}
		return out
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		json.Unmarshal(body, &out)
		return out
	}
	var m map[string]any
	if json.Unmarshal(body, &m) == nil {
		out = append(out, m)
	}
	return out
}

const initBody = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`

// open initializes a session with revision v and returns its id.
func (h *harness) open(v string) string {
	h.t.Helper()
	r := h.post("", fmt.Sprintf(initBody, v))
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != 200 || sid == "" {
		h.t.Fatalf("initialize: status %d, session %q, body %s", r.Status, sid, r.Body)
	}
	if r2 := h.post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r2.Status != 202 {
		h.t.Fatalf("initialized: status %d: %s", r2.Status, r2.Body)
	}
	return sid
}

func (h *harness) echo(sid string, id int, text string) *rpcResult {
	h.t.Helper()
	return h.post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, id, text))
}

// mustEcho checks a session still answers.
func (h *harness) mustEcho(sid string) {
	h.t.Helper()
	r := h.echo(sid, 99, "still here")
	m := r.response(99)
	if r.Status != 200 || m == nil || m["result"] == nil || !strings.Contains(string(r.Body), "still here") {
		h.t.Fatalf("control session broken: status %d body %s", r.Status, r.Body)
	}
}

func (h *harness) delete(sid string) int {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, h.URL, nil)
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Mcp-Session-Id", sid)
	return h.do(req).Status
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// descendants counts live processes whose ancestry leads to this test
// process, plus processes still in soda test cgroups.
func descendants() int {
	self := os.Getpid()
	parents := map[int]int{}
	states := map[int]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:])
		var ppid int
		fmt.Sscanf(f[1], "%d", &ppid)
		parents[pid] = ppid
		states[pid] = f[0][0]
	}
	n := 0
	for pid := range parents {
		for p := parents[pid]; p > 1; p = parents[p] {
			if p == self {
				n++
				break
			}
		}
	}
	return n
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
