package mcpbridge_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatelessStartOutlivesFirstClient: the shared child of stateless
// requests starts slowly; the client whose request started it disconnects,
// and a second client waiting for the same start is still served.
func TestStatelessStartOutlivesFirstClient(t *testing.T) {
	slow := filepath.Join(t.TempDir(), "slow-mcpecho")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 0.6\nexec "+echoBin+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{argv: []string{slow}})
	call := func(ctx context.Context, id int) (int, string, error) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"stateless %d"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, id)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+h.Token)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
		resp, err := h.client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var sb strings.Builder
		_, err = bufio.NewReader(resp.Body).WriteTo(&sb)
		return resp.StatusCode, sb.String(), err
	}
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, _, err := call(first, 1)
		firstDone <- err
	}()
	time.Sleep(100 * time.Millisecond) // the first request is starting the child
	type answer struct {
		status int
		body   string
		err    error
	}
	second := make(chan answer, 1)
	go func() {
		st, body, err := call(context.Background(), 2)
		second <- answer{st, body, err}
	}()
	time.Sleep(100 * time.Millisecond)
	cancelFirst()
	if err := <-firstDone; err == nil {
		t.Fatal("the first request finished before it was cancelled: the start was not slow")
	}
	a := <-second
	if a.err != nil || a.status != 200 || !strings.Contains(a.body, "stateless 2") {
		t.Fatalf("second stateless client after the first left: status %d, err %v, body %s", a.status, a.err, a.body)
	}
	// The shared child stays up for later requests.
	if st, body, err := call(context.Background(), 3); err != nil || st != 200 || !strings.Contains(body, "stateless 3") {
		t.Fatalf("third stateless request: %d %v %s", st, err, body)
	}
}

// TestStatelessMetrics: the stateless revision's shared child is a child,
// not a client session: started and exited are counted, opened and ended
// sessions are not; its calls are.
func TestStatelessMetrics(t *testing.T) {
	h := newHarness(t, harnessOpts{metrics: true})
	if r := h.stateless(1, "tools/call", `{"name":"echo","arguments":{"text":"x"}}`, statelessMeta); r.Status != 200 {
		t.Fatalf("stateless call: %d %s", r.Status, r.Body)
	}
	h.stop()
	fams, err := h.Metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string) float64 {
		var v float64
		for _, f := range fams {
			if f.GetName() == name {
				for _, m := range f.GetMetric() {
					v += m.GetCounter().GetValue()
				}
			}
		}
		return v
	}
	for name, want := range map[string]float64{"soda_mcp_children_started_total": 1, "soda_mcp_children_exited_total": 1,
		"soda_mcp_sessions_opened_total": 0, "soda_mcp_sessions_ended_total": 0, "soda_mcp_calls_total": 1} {
		if got := sum(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
