package mcpbridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listenStream is an open subscriptions/listen stream read event by event.
type listenStream struct {
	t      *testing.T
	cancel context.CancelFunc
	status int
	events chan map[string]any
}

// listen opens subscriptions/listen with the given SubscriptionFilter.
func (h *harness) listen(t *testing.T, id any, filter string) *listenStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	idJSON, _ := json.Marshal(id)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"subscriptions/listen","params":{"_meta":%s,"notifications":%s}}`, idJSON, statelessMeta, filter)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("subscriptions/listen: %v", err)
	}
	ls := &listenStream{t: t, cancel: cancel, status: resp.StatusCode, events: make(chan map[string]any, 64)}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		cancel()
		t.Fatalf("subscriptions/listen: status %d, Content-Type %q", resp.StatusCode, ct)
	}
	go func() {
		defer resp.Body.Close()
		defer close(ls.events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(d), &m) == nil {
					ls.events <- m
				}
			}
		}
	}()
	t.Cleanup(cancel)
	return ls
}

// next returns the next event, or nil if none comes within d.
func (ls *listenStream) next(d time.Duration) map[string]any {
	select {
	case m := <-ls.events:
		return m
	case <-time.After(d):
		return nil
	}
}

// drain returns the events that arrive within d.
func (ls *listenStream) drain(d time.Duration) []map[string]any {
	var out []map[string]any
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-ls.events:
			if !ok {
				return out
			}
			out = append(out, m)
		case <-deadline:
			return out
		}
	}
}

func subscriptionID(m map[string]any) any {
	p, _ := m["params"].(map[string]any)
	meta, _ := p["_meta"].(map[string]any)
	return meta["io.modelcontextprotocol/subscriptionId"]
}

// notifyText calls mcpecho's notify tool and returns its text: the URIs
// the child is subscribed to.
func (h *harness) notifyText(t *testing.T, id int) string {
	t.Helper()
	r := h.stateless(id, "tools/call", `{"name":"notify"}`, statelessMeta)
	res, _ := r.response(float64(id))["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if r.Status != 200 || len(content) != 1 {
		t.Fatalf("notify: status %d: %s", r.Status, r.Body)
	}
	return content[0].(map[string]any)["text"].(string)
}

// TestStatelessListen: subscriptions/listen acknowledges first with the
// filter the child can honour, then carries only the notifications asked
// for, each tagged with the subscription id; resourceSubscriptions reach
// the child as resources/subscribe and leave it as resources/unsubscribe
// when the last listener goes.
func TestStatelessListen(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--notify"}})
	tools := h.listen(t, 41, `{"toolsListChanged":true,"resourcesListChanged":true,"resourceSubscriptions":["test://a"]}`)
	ack := tools.next(5 * time.Second)
	if ack == nil || ack["method"] != "notifications/subscriptions/acknowledged" || subscriptionID(ack) != 41.0 {
		t.Fatalf("first event %v, want the acknowledgement for subscription 41", ack)
	}
	agreed, _ := ack["params"].(map[string]any)["notifications"].(map[string]any)
	// mcpecho --notify has tools.listChanged and resources.subscribe, not
	// resources.listChanged.
	if agreed["toolsListChanged"] != true || agreed["resourcesListChanged"] != nil || fmt.Sprint(agreed["resourceSubscriptions"]) != "[test://a]" {
		t.Fatalf("acknowledged %v", agreed)
	}
	prompts := h.listen(t, "42", `{"promptsListChanged":true}`)
	if ack := prompts.next(5 * time.Second); ack == nil || ack["method"] != "notifications/subscriptions/acknowledged" || subscriptionID(ack) != "42" {
		t.Fatalf("second stream's first event %v", ack)
	}
	if got := h.notifyText(t, 1); got != "subscribed: test://a" {
		t.Fatalf("child subscribed to %q, want test://a", got)
	}
	methods := func(evs []map[string]any, id any) []string {
		var out []string
		for _, e := range evs {
			if subscriptionID(e) != id {
				t.Fatalf("event without subscription id %v: %v", id, e)
			}
			m := e["method"].(string)
			if m == "notifications/resources/updated" {
				m += " " + e["params"].(map[string]any)["uri"].(string)
			}
			out = append(out, m)
		}
		return out
	}
	if got := fmt.Sprint(methods(tools.drain(500*time.Millisecond), 41.0)); got != "[notifications/tools/list_changed notifications/resources/updated test://a]" {
		t.Fatalf("tools stream got %s", got)
	}
	if got := fmt.Sprint(methods(prompts.drain(200*time.Millisecond), "42")); got != "[notifications/prompts/list_changed]" {
		t.Fatalf("prompts stream got %s", got)
	}
	tools.cancel()
	waitFor(t, 5*time.Second, "resources/unsubscribe after the last listener of test://a left", func() bool {
		return h.notifyText(t, 2) == "subscribed: "
	})
}

// TestStatelessListenEndsWithChild: when the shared child ends (here: the
// bridge shuts down), the listen stream is closed with the
// SubscriptionsListenResult.
func TestStatelessListenEndsWithChild(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--notify"}})
	ls := h.listen(t, 7, `{"toolsListChanged":true}`)
	if ack := ls.next(5 * time.Second); ack == nil {
		t.Fatal("no acknowledgement")
	}
	go h.stop()
	end := ls.next(5 * time.Second)
	res, _ := end["result"].(map[string]any)
	if end == nil || end["id"] != 7.0 || res["resultType"] != "complete" || res["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"] != 7.0 {
		t.Fatalf("last event %v, want the SubscriptionsListenResult for 7", end)
	}
}

// TestGoSDKStatelessListen: the go-sdk client on 2026-07-28 (server/discover,
// then subscriptions/listen for the handlers it has) gets list_changed and
// resources/updated from an older child through the bridge.
func TestGoSDKStatelessListen(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--notify"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	note := func(what string) {
		mu.Lock()
		got[what]++
		mu.Unlock()
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler:   func(context.Context, *mcp.ToolListChangedRequest) { note("tools") },
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) { note("prompts") },
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			note("updated " + r.Params.URI)
		},
		//lint:ignore SA1019 logging is deprecated in 2026-07-28, not gone: the bridge must relay it
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) { note("log") },
	})
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL, HTTPClient: h.sdkHTTPClient(), MaxRetries: -1}
	cs, err := client.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("client speaks %q, not the stateless revision", v)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://r"}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	waitFor(t, 5*time.Second, "the child subscribed to test://r", func() bool { return h.notifyText(t, 3) == "subscribed: test://r" })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notify"})
	if err != nil || res.IsError {
		t.Fatalf("notify: %v %v", err, res)
	}
	waitFor(t, 5*time.Second, "list_changed and resources/updated at the go-sdk client", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["tools"] > 0 && got["prompts"] > 0 && got["updated test://r"] > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got["log"] != 0 {
		t.Fatalf("a log message reached the client without being asked for: %v", got)
	}
}
