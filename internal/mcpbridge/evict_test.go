package mcpbridge_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maxSampler records the largest number of live children while it runs,
// both as the bridge counts them and as /proc shows them.
type maxSampler struct {
	stop     chan struct{}
	done     chan struct{}
	counted  atomic.Int64
	procs    atomic.Int64
	samples  atomic.Int64
	baseline int
}

func sampleChildren(h *harness) *maxSampler {
	m := &maxSampler{stop: make(chan struct{}), done: make(chan struct{}), baseline: descendants()}
	go func() {
		defer close(m.done)
		for {
			if c := h.Bridge.Stats().Children; c > m.counted.Load() {
				m.counted.Store(c)
			}
			if p := int64(descendants() - m.baseline); p > m.procs.Load() {
				m.procs.Store(p)
			}
			m.samples.Add(1)
			select {
			case <-m.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return m
}

func (m *maxSampler) finish() {
	close(m.stop)
	<-m.done
}

// TestEvictIdleAtCap: a client that opens 30 sessions one after another and
// never DELETEs them is served every time; the bridge ends the session idle
// longest instead of answering 503, never runs more than MaxSessions
// children, and an evicted session's id gets 404 so its client
// re-initialises.
func TestEvictIdleAtCap(t *testing.T) {
	const maxSessions, total = 8, 30
	h := newHarness(t, harnessOpts{maxSessions: maxSessions})
	m := sampleChildren(h)
	var ids []string
	for i := range total {
		r := h.post("", fmt.Sprintf(initBody, "2025-11-25"))
		sid := r.Header.Get("Mcp-Session-Id")
		if r.Status != 200 || sid == "" {
			m.finish()
			t.Fatalf("session %d: initialize: status %d, Retry-After %q, body %s", i+1, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if r := h.post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.Status != 202 {
			m.finish()
			t.Fatalf("session %d: initialized: %d %s", i+1, r.Status, r.Body)
		}
		text := fmt.Sprintf("call of session %d", i+1)
		if r := h.echo(sid, 1, text); r.Status != 200 || r.response(1) == nil || !strings.Contains(string(r.Body), text) {
			m.finish()
			t.Fatalf("session %d: tools/call: %d %s", i+1, r.Status, r.Body)
		}
		ids = append(ids, sid)
	}
	m.finish()
	st := h.Bridge.Stats()
	t.Logf("%d sessions served, %d live; most children alive: %d counted, %d in /proc (%d samples)",
		st.SessionsStarted, st.Sessions, m.counted.Load(), m.procs.Load(), m.samples.Load())
	if st.SessionsStarted != total || st.Sessions != maxSessions {
		t.Errorf("sessions started %d, live %d; want %d, %d", st.SessionsStarted, st.Sessions, total, maxSessions)
	}
	if c, p := m.counted.Load(), m.procs.Load(); c > maxSessions || p > maxSessions {
		t.Errorf("up to %d children counted, %d in /proc; want at most MaxSessions=%d", c, p, maxSessions)
	}
	// The oldest sessions were evicted: their ids are unknown now.
	for i, sid := range ids[:total-maxSessions] {
		if r := h.echo(sid, 2, "gone?"); r.Status != 404 || !strings.Contains(string(r.Body), "initialize a new one") {
			t.Errorf("evicted session %d: status %d %s, want 404", i+1, r.Status, r.Body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, h.URL, nil)
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", ids[0])
	if r := h.do(req); r.Status != 404 {
		t.Errorf("GET stream on an evicted session: %d %s, want 404", r.Status, r.Body)
	}
	// The newest are untouched.
	for _, sid := range ids[total-maxSessions:] {
		h.mustEcho(sid)
	}
	logs := h.Logs.String()
	if !strings.Contains(logs, "session evicted") || !strings.Contains(logs, "session_id="+ids[0]) || !strings.Contains(logs, "idle=") {
		t.Errorf("no structured eviction record for %s in the log", ids[0])
	}
	if n := strings.Count(logs, "msg=\"session evicted\""); n != total-maxSessions {
		t.Errorf("%d eviction records, want %d", n, total-maxSessions)
	}
}

// TestSessionCapBusy: when every session is busy (a call in flight, a GET
// stream open, a legacy SSE stream open), a new client gets 503 with
// Retry-After; as soon as one becomes idle, the next client is admitted in
// its place.
func TestSessionCapBusy(t *testing.T) {
	const maxSessions = 8
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--hang-tool"}, maxSessions: maxSessions})
	auth := "Bearer " + h.Token

	// 3 sessions with a call that never returns.
	var calls []context.CancelFunc
	var callers sync.WaitGroup
	var callIDs []string
	for range 3 {
		sid := h.open("2025-11-25")
		callIDs = append(callIDs, sid)
		ctx, cancel := context.WithCancel(context.Background())
		calls = append(calls, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hang","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", auth)
		req.Header.Set("Mcp-Session-Id", sid)
		callers.Go(func() {
			if resp, err := h.client.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	defer func() {
		for _, c := range calls {
			c()
		}
		callers.Wait()
	}()
	// 4 sessions with a GET stream open.
	openStream := func(path, sid string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.Base+path, nil)
		req.Header.Set("Authorization", auth)
		req.Header.Set("Accept", "text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := h.client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			cancel()
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		t.Cleanup(func() { cancel(); resp.Body.Close() })
		return resp, cancel
	}
	var getIDs []string
	var closeGet []context.CancelFunc
	for range 4 {
		sid := h.open("2025-11-25")
		getIDs = append(getIDs, sid)
		_, cancel := openStream("/mcp", sid)
		closeGet = append(closeGet, cancel)
	}
	// 1 legacy HTTP+SSE session: it lives as long as its stream.
	legacy, _ := openStream("/sse", "")
	line, err := bufio.NewReader(legacy.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: endpoint") {
		t.Fatalf("legacy SSE: %q %v", line, err)
	}
	waitFor(t, 5*time.Second, "3 calls in flight", func() bool { return h.Bridge.Stats().Inflight == 3 })
	if st := h.Bridge.Stats(); st.Sessions != maxSessions {
		t.Fatalf("%d sessions, want %d", st.Sessions, maxSessions)
	}

	r := h.post("", fmt.Sprintf(initBody, "2025-11-25"))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "allows 8 live sessions") {
		t.Fatalf("9th session with all 8 busy: %d Retry-After %q %s; want 503 with Retry-After", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if !strings.Contains(h.Logs.String(), "limit hit") {
		t.Error("no limit record in the log")
	}
	if strings.Contains(h.Logs.String(), "session evicted") {
		t.Fatal("a busy session was evicted")
	}

	// One call ends: its session is idle now and makes room.
	calls[0]()
	waitFor(t, 5*time.Second, "the call to end", func() bool { return h.Bridge.Stats().Inflight == 2 })
	fresh := h.open("2025-11-25")
	h.mustEcho(fresh)
	openStream("/mcp", fresh) // busy again: only closing a stream frees a slot below
	if r := h.echo(callIDs[0], 8, "x"); r.Status != 404 {
		t.Errorf("the idle session was not evicted: %d %s", r.Status, r.Body)
	}
	// A closed GET stream makes its session evictable too.
	closeGet[0]()
	waitFor(t, 5*time.Second, "GET stream to close", func() bool {
		return h.post("", fmt.Sprintf(initBody, "2025-11-25")).Status == 200
	})
	if r := h.echo(getIDs[0], 9, "x"); r.Status != 404 {
		t.Errorf("the session whose GET stream closed was not evicted: %d %s", r.Status, r.Body)
	}
	// The others stayed.
	for _, sid := range getIDs[1:] {
		h.mustEcho(sid)
	}
}
