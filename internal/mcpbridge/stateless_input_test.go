package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/mcpbridge"
)

// askChild is the command line of testdata/askchild.mjs, a dependency-free
// 2025-11-25 stdio server whose tools ask the client things.
func askChild(t testing.TB) []string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed: %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	return []string{"node", filepath.Join(filepath.Dir(file), "testdata", "askchild.mjs")}
}

const statelessCaps = `{"elicitation":{},"sampling":{},"roots":{}}`

// statelessCall sends one 2026-07-28 request and returns its only response.
func (h *harness) statelessCall(id int, method, params string) map[string]any {
	h.t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(params), &p); err != nil {
		h.t.Fatalf("bad params %s: %v", params, err)
	}
	meta, _ := p["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		p["_meta"] = meta
	}
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	if _, ok := meta["io.modelcontextprotocol/clientCapabilities"]; !ok {
		meta["io.modelcontextprotocol/clientCapabilities"] = json.RawMessage(statelessCaps)
	}
	meta["io.modelcontextprotocol/clientInfo"] = map[string]any{"name": "raw", "version": "1"}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
	hdr := []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}
	for _, k := range []string{"name", "uri"} {
		if v, ok := p[k].(string); ok {
			hdr = append(hdr, "Mcp-Name", v) // as SEP-2243 asks (stateless_rules.go)
			break
		}
	}
	r := h.post("", string(body), hdr...)
	if r.Status != 200 {
		h.t.Fatalf("%s: status %d: %s", method, r.Status, r.Body)
	}
	m := r.response(float64(id))
	if m == nil {
		h.t.Fatalf("%s: no response %d in %s", method, id, r.Body)
	}
	return m
}

// inputRequired checks that m is an InputRequiredResult and returns its
// requests and state.
func inputRequired(t *testing.T, m map[string]any) (map[string]any, string) {
	t.Helper()
	res, _ := m["result"].(map[string]any)
	if res == nil || res["resultType"] != "input_required" {
		t.Fatalf("want an input_required result, got %v", m)
	}
	reqs, _ := res["inputRequests"].(map[string]any)
	state, _ := res["requestState"].(string)
	if len(reqs) == 0 || len(state) < 20 {
		t.Fatalf("input_required without requests or a real state: %v", m)
	}
	return reqs, state
}

// complete checks that m is a complete result and returns its text.
func complete(t *testing.T, m map[string]any) string {
	t.Helper()
	res, _ := m["result"].(map[string]any)
	if res == nil || res["resultType"] != "complete" {
		t.Fatalf("want a complete result, got %v", m)
	}
	b, _ := json.Marshal(res["content"])
	return string(b)
}

func rpcError(t *testing.T, m map[string]any) (float64, string) {
	t.Helper()
	e, _ := m["error"].(map[string]any)
	if e == nil {
		t.Fatalf("want an error, got %v", m)
	}
	code, _ := e["code"].(float64)
	msg, _ := e["message"].(string)
	return code, msg
}

func methodsOf(reqs map[string]any) []string {
	var out []string
	for _, v := range reqs {
		out = append(out, v.(map[string]any)["method"].(string))
	}
	sort.Strings(out)
	return out
}

func keyFor(reqs map[string]any, method string) string {
	for k, v := range reqs {
		if v.(map[string]any)["method"] == method {
			return k
		}
	}
	return ""
}

func followUp(name, state string, responses map[string]any) string {
	b, _ := json.Marshal(map[string]any{"name": name, "arguments": map[string]any{}, "inputResponses": responses, "requestState": state})
	return string(b)
}

func waitInputsFreed(t *testing.T, h *harness) {
	t.Helper()
	waitFor(t, 5*time.Second, "input calls freed", func() bool {
		c, s, held := mcpbridge.InputCounts(h.Bridge)
		return c == 0 && s == 0 && held == 0
	})
}

var (
	acceptAlice = map[string]any{"action": "accept", "content": map[string]any{"name": "Alice"}}
	sampled     = map[string]any{"role": "assistant", "content": map[string]any{"type": "text", "text": "Paris"}, "model": "test-model", "stopReason": "endTurn"}
	roots       = map[string]any{"roots": []any{map[string]any{"uri": "file:///work", "name": "work"}}}
)

// TestStatelessInputEverythingElicitation: server-everything's elicitation
// tool, asked by a stateless client over raw HTTP, comes back as an
// InputRequiredResult; the follow-up's answer reaches the tool.
func TestStatelessInputEverythingElicitation(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: everythingCmd(t)})
	m := h.statelessCall(1, "tools/call", `{"name":"trigger-elicitation-request","arguments":{}}`)
	reqs, state := inputRequired(t, m)
	if got := methodsOf(reqs); len(got) != 1 || got[0] != "elicitation/create" {
		t.Fatalf("input requests %v", reqs)
	}
	key := keyFor(reqs, "elicitation/create")
	params := reqs[key].(map[string]any)["params"].(map[string]any)
	if params["requestedSchema"] == nil || !strings.Contains(fmt.Sprint(params["message"]), "provide inputs") {
		t.Fatalf("elicitation params not passed through: %v", params)
	}
	resp := map[string]any{"action": "accept", "content": map[string]any{"name": "Alice Liddell", "check": true, "integer": 7}}
	m = h.statelessCall(2, "tools/call", followUp("trigger-elicitation-request", state, map[string]any{key: resp}))
	if txt := complete(t, m); !strings.Contains(txt, "Alice Liddell") {
		t.Fatalf("the tool did not get the answer: %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputEverythingSampling: the same with server-everything's
// sampling tool.
func TestStatelessInputEverythingSampling(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: everythingCmd(t)})
	m := h.statelessCall(1, "tools/call", `{"name":"trigger-sampling-request","arguments":{"prompt":"capital of France?","maxTokens":20}}`)
	reqs, state := inputRequired(t, m)
	key := keyFor(reqs, "sampling/createMessage")
	if key == "" || len(reqs) != 1 {
		t.Fatalf("input requests %v", reqs)
	}
	if !strings.Contains(fmt.Sprint(reqs[key]), "capital of France?") {
		t.Fatalf("sampling params not passed through: %v", reqs[key])
	}
	b, _ := json.Marshal(map[string]any{"name": "trigger-sampling-request", "arguments": map[string]any{"prompt": "capital of France?", "maxTokens": 20},
		"inputResponses": map[string]any{key: sampled}, "requestState": state})
	m = h.statelessCall(2, "tools/call", string(b))
	if txt := complete(t, m); !strings.Contains(txt, "Paris") {
		t.Fatalf("the tool did not get the sample: %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputNoCapability: a client that declares no capability to
// answer is not asked: the child's request is refused with 2026-07-28's
// MissingRequiredClientCapability (-32021, naming the capability) and the
// tool reports the failure.
func TestStatelessInputNoCapability(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	m := h.statelessCall(1, "tools/call", `{"name":"ask_one","_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}`)
	if txt := complete2(t, m); !strings.Contains(txt, "error -32021") || !strings.Contains(txt, "did not declare") {
		t.Fatalf("want the refusal in the tool's answer, got %s", txt)
	}
}

// TestStatelessInputConcurrent: requests the child sends together come in
// one InputRequiredResult.
func TestStatelessInputConcurrent(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_three"}`))
	if got := methodsOf(reqs); fmt.Sprint(got) != "[elicitation/create roots/list sampling/createMessage]" {
		t.Fatalf("input requests %v", got)
	}
	m := h.statelessCall(2, "tools/call", followUp("ask_three", state, map[string]any{
		keyFor(reqs, "elicitation/create"): acceptAlice, keyFor(reqs, "sampling/createMessage"): sampled, keyFor(reqs, "roots/list"): roots,
	}))
	txt := complete(t, m)
	for _, want := range []string{"Alice", "Paris", "file:///work"} {
		if !strings.Contains(txt, want) {
			t.Fatalf("answer %s lacks %s", txt, want)
		}
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputMissingResponses: a follow-up that answers only some
// requests gets a new InputRequiredResult for the rest, with a new state;
// the used state is gone.
func TestStatelessInputMissingResponses(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_three"}`))
	m := h.statelessCall(2, "tools/call", followUp("ask_three", state, map[string]any{keyFor(reqs, "roots/list"): roots}))
	rest, state2 := inputRequired(t, m)
	if got := methodsOf(rest); fmt.Sprint(got) != "[elicitation/create sampling/createMessage]" || state2 == state {
		t.Fatalf("re-request %v with state %q (was %q)", got, state2, state)
	}
	if code, _ := rpcError(t, h.statelessCall(3, "tools/call", followUp("ask_three", state, map[string]any{}))); code != -32602 {
		t.Fatalf("reused state: code %v", code)
	}
	m = h.statelessCall(4, "tools/call", followUp("ask_three", state2, map[string]any{
		keyFor(rest, "elicitation/create"): acceptAlice, keyFor(rest, "sampling/createMessage"): sampled,
	}))
	if txt := complete(t, m); !strings.Contains(txt, "Alice") || !strings.Contains(txt, "file:///work") {
		t.Fatalf("answer %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputRounds: a child that asks again after an answer makes
// a second round.
func TestStatelessInputRounds(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_rounds"}`))
	if !strings.Contains(fmt.Sprint(reqs), "Step 1") {
		t.Fatalf("round 1: %v", reqs)
	}
	reqs2, state2 := inputRequired(t, h.statelessCall(2, "tools/call", followUp("ask_rounds", state, map[string]any{keyFor(reqs, "elicitation/create"): acceptAlice})))
	if !strings.Contains(fmt.Sprint(reqs2), "Step 2") || state2 == state {
		t.Fatalf("round 2: %v", reqs2)
	}
	blue := map[string]any{"action": "accept", "content": map[string]any{"name": "blue"}}
	txt := complete(t, h.statelessCall(3, "tools/call", followUp("ask_rounds", state2, map[string]any{keyFor(reqs2, "elicitation/create"): blue})))
	if !strings.Contains(txt, "Alice") || !strings.Contains(txt, "blue") {
		t.Fatalf("answer %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputBadState: tampered, unknown and misbound states and
// malformed responses get -32602 and leave the real state usable.
func TestStatelessInputBadState(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_one"}`))
	key := keyFor(reqs, "elicitation/create")
	bad := []struct{ name, params string }{
		{"tampered", followUp("ask_one", state+"-TAMPERED", map[string]any{key: acceptAlice})},
		{"unknown", followUp("ask_one", "no-such-state", map[string]any{key: acceptAlice})},
		{"empty", followUp("ask_one", "", map[string]any{key: acceptAlice})},
		{"other tool", followUp("ask_three", state, map[string]any{key: acceptAlice})},
		{"response not an object", followUp("ask_one", state, map[string]any{key: 12345})},
		{"responses null", fmt.Sprintf(`{"name":"ask_one","inputResponses":null,"requestState":%q}`, state)},
	}
	for i, c := range bad {
		code, msg := rpcError(t, h.statelessCall(10+i, "tools/call", c.params))
		if code != -32602 {
			t.Fatalf("%s: code %v (%s)", c.name, code, msg)
		}
	}
	// Another method with the state: it names a tools/call.
	b, _ := json.Marshal(map[string]any{"name": "ask_one", "inputResponses": map[string]any{key: acceptAlice}, "requestState": state})
	if code, _ := rpcError(t, h.statelessCall(30, "prompts/get", string(b))); code != -32602 {
		t.Fatalf("other method: code %v", code)
	}
	txt := complete(t, h.statelessCall(40, "tools/call", followUp("ask_one", state, map[string]any{key: acceptAlice})))
	if !strings.Contains(txt, "Alice") {
		t.Fatalf("answer %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputExpiry: a client that never comes back: after the
// lifetime the child's request is answered with an error, the call is
// cancelled in the child, everything is freed and the state is refused.
func TestStatelessInputExpiry(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	mcpbridge.SetInputBounds(h.Bridge, 300*time.Millisecond, 0)
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_one"}`))
	if c, s, held := mcpbridge.InputCounts(h.Bridge); c != 1 || s != 1 || held != 1 {
		t.Fatalf("while waiting: calls %d states %d held %d", c, s, held)
	}
	waitInputsFreed(t, h)
	waitFor(t, 5*time.Second, "the child told", func() bool {
		l := h.Logs.String()
		return strings.Contains(l, "ask_one got error -32001: soda-mcpd: the client did not send the input within 300ms") &&
			strings.Contains(l, `cancelled: soda-mcpd: the client did not send the input within 300ms`)
	})
	if code, _ := rpcError(t, h.statelessCall(2, "tools/call", followUp("ask_one", state, map[string]any{keyFor(reqs, "elicitation/create"): acceptAlice}))); code != -32602 {
		t.Fatalf("expired state: code %v", code)
	}
}

// TestStatelessInputChildCancels: the child withdraws its request while the
// client thinks; the follow-up gets the call's result and the answer to the
// withdrawn request is not written to the child.
func TestStatelessInputChildCancels(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_cancel"}`))
	waitFor(t, 5*time.Second, "the child cancels", func() bool { _, _, held := mcpbridge.InputCounts(h.Bridge); return held == 0 })
	txt := complete(t, h.statelessCall(2, "tools/call", followUp("ask_cancel", state, map[string]any{keyFor(reqs, "elicitation/create"): acceptAlice})))
	if !strings.Contains(txt, "server cancelled its question") {
		t.Fatalf("answer %s", txt)
	}
	waitInputsFreed(t, h)
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(h.Logs.String(), "answer to no request") {
		t.Fatal("the answer to the withdrawn request was written to the child")
	}
}

// TestStatelessInputClientLeaves: a client that disconnects while its
// follow-up waits for the call's result cancels the call in the child.
func TestStatelessInputClientLeaves(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_slow"}`))
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask_slow","inputResponses":{%q:{"action":"accept","content":{"name":"Alice"}}},"requestState":%q,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}}}`,
		keyFor(reqs, "elicitation/create"), state)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "ask_slow")
	if resp, err := h.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the follow-up was answered (%d) before the call ended", resp.StatusCode)
	}
	waitInputsFreed(t, h)
	waitFor(t, 5*time.Second, "the call cancelled in the child", func() bool {
		l := h.Logs.String()
		return strings.Contains(l, "ask_slow got") && strings.Contains(l, "cancelled: client disconnected")
	})
}

// TestStatelessInputTwoClients: while one call is held for its client's
// follow-up, another client's call asks and gets its own round; each
// client's answer reaches its own call.
func TestStatelessInputTwoClients(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs1, state1 := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_one"}`))
	reqs2, state2 := inputRequired(t, h.statelessCall(2, "tools/call", `{"name":"ask_one"}`))
	if c, s, held := mcpbridge.InputCounts(h.Bridge); c != 2 || s != 2 || held != 2 {
		t.Fatalf("calls %d states %d held %d", c, s, held)
	}
	bob := map[string]any{"action": "accept", "content": map[string]any{"name": "Bob"}}
	txt2 := complete(t, h.statelessCall(3, "tools/call", followUp("ask_one", state2, map[string]any{keyFor(reqs2, "elicitation/create"): bob})))
	txt1 := complete(t, h.statelessCall(4, "tools/call", followUp("ask_one", state1, map[string]any{keyFor(reqs1, "elicitation/create"): acceptAlice})))
	if !strings.Contains(txt1, "Alice") || !strings.Contains(txt2, "Bob") {
		t.Fatalf("answers crossed: first %s, second %s", txt1, txt2)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputAmbiguous: while another call of an input method runs,
// a request of the child cannot be told apart on its one stdio stream: it
// is refused rather than sent to a client that might not be the one asked.
func TestStatelessInputAmbiguous(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	done := make(chan map[string]any, 1)
	go func() {
		done <- h.statelessCall(1, "tools/call", `{"name":"ask_slow","arguments":{"ms":1500},"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}`)
	}()
	waitFor(t, 5*time.Second, "the plain call runs", func() bool { return strings.Contains(h.Logs.String(), "ask_slow got error") })
	txt := complete(t, h.statelessCall(2, "tools/call", `{"name":"ask_one"}`))
	if !strings.Contains(txt, "error -32601") || !strings.Contains(txt, "2 stateless calls are in flight") {
		t.Fatalf("second call: %s", txt)
	}
	if txt := complete2(t, <-done); !strings.Contains(txt, "ask_slow: error -32021") {
		t.Fatalf("first call: %s", txt)
	}
	waitInputsFreed(t, h)
}

// TestStatelessInputMaxCalls: beyond the cap of calls held for a
// follow-up, a call's child requests are refused and the call completes.
func TestStatelessInputMaxCalls(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	mcpbridge.SetInputBounds(h.Bridge, 0, 1)
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_one"}`))
	txt := complete(t, h.statelessCall(2, "tools/call", `{"name":"ask_one"}`))
	if !strings.Contains(txt, "error -32601") || !strings.Contains(txt, "1 stateless calls already wait for input") {
		t.Fatalf("call over the cap: %s", txt)
	}
	if !strings.Contains(h.Logs.String(), "limit=input_calls") {
		t.Fatal("the limit was not logged")
	}
	complete(t, h.statelessCall(3, "tools/call", followUp("ask_one", state, map[string]any{keyFor(reqs, "elicitation/create"): acceptAlice})))
	waitInputsFreed(t, h)
}

// TestStatelessInputPerCallBound: a call that asks more than 16 things at
// once has the rest refused; the 16 held come in one round.
func TestStatelessInputPerCallBound(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: askChild(t)})
	reqs, state := inputRequired(t, h.statelessCall(1, "tools/call", `{"name":"ask_many","arguments":{"n":20}}`))
	if len(reqs) != 16 {
		t.Fatalf("%d input requests held, want 16", len(reqs))
	}
	answers := map[string]any{}
	for k := range reqs {
		answers[k] = acceptAlice
	}
	b, _ := json.Marshal(map[string]any{"name": "ask_many", "arguments": map[string]any{"n": 20}, "inputResponses": answers, "requestState": state})
	if txt := complete(t, h.statelessCall(2, "tools/call", string(b))); !strings.Contains(txt, "answered 16 refused 4") {
		t.Fatalf("answer %s", txt)
	}
	if !strings.Contains(h.Logs.String(), "limit=inputs_per_call") {
		t.Fatal("the limit was not logged")
	}
	waitInputsFreed(t, h)
}

// complete2 returns the text of a result that took the plain path (which
// may or may not add resultType).
func complete2(t *testing.T, m map[string]any) string {
	t.Helper()
	res, _ := m["result"].(map[string]any)
	if res == nil {
		t.Fatalf("want a result, got %v", m)
	}
	b, _ := json.Marshal(res["content"])
	return string(b)
}

// TestStatelessInputGoSDK: the go-sdk client on 2026-07-28 answers the
// InputRequiredResult with its own handlers and retries on its own.
func TestStatelessInputGoSDK(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: everythingCmd(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Gopher"}}, nil
		},
		//lint:ignore SA1019 sampling is deprecated in 2026-07-28, not gone: the bridge must relay it
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			//lint:ignore SA1019 as above
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "Lyon"}}, nil
		},
	})
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL, HTTPClient: h.sdkHTTPClient(), MaxRetries: -1}
	cs, err := client.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-elicitation-request", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("elicitation tool: %v", err)
	}
	if txt := allText(res); !strings.Contains(txt, "Gopher") {
		t.Fatalf("elicitation tool answered %q", txt)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-sampling-request", Arguments: map[string]any{"prompt": "hi"}})
	if err != nil {
		t.Fatalf("sampling tool: %v", err)
	}
	if txt := allText(res); !strings.Contains(txt, "Lyon") {
		t.Fatalf("sampling tool answered %q", txt)
	}
	waitInputsFreed(t, h)
}

func allText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// BenchmarkStatelessCall measures a stateless tools/call to mcpecho the
// plain way (the client declares no capability to answer requests) and
// through the input translation (it declares elicitation).
func BenchmarkStatelessCall(b *testing.B) {
	for _, c := range []struct{ name, caps string }{{"plain", `{}`}, {"input", `{"elicitation":{}}`}} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, harnessOpts{})
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"bench"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + c.caps + `,"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}}}}`
			client := &http.Client{}
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, h.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", "Bearer "+h.Token)
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", "echo")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var buf [512]byte
				n, _ := resp.Body.Read(buf[:])
				resp.Body.Close()
				if resp.StatusCode != 200 || n == 0 || !strings.Contains(string(buf[:n]), "bench") {
					b.Fatalf("status %d: %s", resp.StatusCode, buf[:n])
				}
			}
		})
	}
}
