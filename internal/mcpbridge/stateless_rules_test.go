package mcpbridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// statelessMeta is a complete per-request _meta of 2026-07-28.
const statelessMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// stateless posts one request of the stateless revision: method and params
// (without _meta; meta is added as params._meta unless it is empty), with
// the headers a 2026-07-28 client sends (Mcp-Protocol-Version, Mcp-Method,
// Mcp-Name) overridden by hdr ("" deletes one).
func (h *harness) stateless(id int, method, params, meta string, hdr ...string) *rpcResult {
	h.t.Helper()
	if params == "" {
		params = "{}"
	}
	if meta != "" {
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			h.t.Fatalf("params %s: %v", params, err)
		}
		p["_meta"] = json.RawMessage(meta)
		b, _ := json.Marshal(p)
		params = string(b)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
	std := []string{"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", method}
	var p struct {
		Name *string `json:"name"`
		URI  *string `json:"uri"`
	}
	_ = json.Unmarshal([]byte(params), &p)
	switch {
	case p.Name != nil && (method == "tools/call" || method == "prompts/get"):
		std = append(std, "Mcp-Name", *p.Name)
	case p.URI != nil && method == "resources/read":
		std = append(std, "Mcp-Name", *p.URI)
	}
	return h.post("", body, append(std, hdr...)...)
}

// rpcError returns the error code and the id of a lone JSON-RPC answer.
func (r *rpcResult) rpcError() (code int, id any) {
	if len(r.Msgs) != 1 {
		return 0, nil
	}
	m := r.Msgs[0]
	if e, ok := m["error"].(map[string]any); ok {
		c, _ := e["code"].(float64)
		return int(c), m["id"]
	}
	return 0, m["id"]
}

// TestStatelessRules: each request rule of 2026-07-28 that the bridge
// enforces for its older child, with the HTTP status and JSON-RPC error
// (and the request's own id) that the revision's reference and the
// conformance runner expect.
func TestStatelessRules(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	echo := `{"name":"echo","arguments":{"text":"hi"}}`
	noVersion := `{"io.modelcontextprotocol/clientCapabilities":{}}`
	noCaps := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	noInfo := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	oldMeta := `{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`
	v999 := `{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}`
	cases := []struct {
		name           string
		method, params string
		meta           string
		hdr            []string
		status, code   int // code 0: a result
	}{
		{name: "control: complete request", method: "tools/call", params: echo, meta: statelessMeta, status: 200},
		{name: "clientInfo is optional", method: "tools/list", meta: noInfo, status: 200},
		{name: "missing _meta", method: "server/discover", status: 400, code: -32602},
		{name: "_meta without protocolVersion", method: "server/discover", meta: noVersion, status: 400, code: -32602},
		{name: "_meta without clientCapabilities", method: "server/discover", meta: noCaps, status: 400, code: -32602},
		{name: "no Mcp-Protocol-Version header", method: "tools/list", meta: statelessMeta, hdr: []string{"Mcp-Protocol-Version", ""}, status: 400, code: -32020},
		{name: "header and _meta differ", method: "server/discover", meta: v999, status: 400, code: -32020},
		{name: "unsupported version v999.0.0", method: "server/discover", meta: v999, hdr: []string{"Mcp-Protocol-Version", "v999.0.0"}, status: 400, code: -32022},
		{name: "sessionful revision without a session", method: "tools/list", meta: oldMeta, hdr: []string{"Mcp-Protocol-Version", "2025-11-25"}, status: 400, code: -32022},
		{name: "no Mcp-Method header", method: "tools/list", meta: statelessMeta, hdr: []string{"Mcp-Method", ""}, status: 400, code: -32020},
		{name: "Mcp-Method mismatch", method: "tools/list", meta: statelessMeta, hdr: []string{"Mcp-Method", "prompts/list"}, status: 400, code: -32020},
		{name: "Mcp-Method is case-sensitive", method: "tools/list", meta: statelessMeta, hdr: []string{"Mcp-Method", "TOOLS/LIST"}, status: 400, code: -32020},
		{name: "Mcp-Method with whitespace", method: "tools/list", meta: statelessMeta, hdr: []string{"Mcp-Method", "  tools/list  "}, status: 200},
		{name: "no Mcp-Name header", method: "tools/call", params: echo, meta: statelessMeta, hdr: []string{"Mcp-Name", ""}, status: 400, code: -32020},
		{name: "Mcp-Name mismatch", method: "tools/call", params: echo, meta: statelessMeta, hdr: []string{"Mcp-Name", "wrong_tool_name"}, status: 400, code: -32020},
		{name: "Mcp-Name with whitespace", method: "tools/call", params: echo, meta: statelessMeta, hdr: []string{"Mcp-Name", "  echo  "}, status: 200},
		{name: "Mcp-Name mismatch on resources/read", method: "resources/read", params: `{"uri":"test://a"}`, meta: statelessMeta, hdr: []string{"Mcp-Name", "test://b"}, status: 400, code: -32020},
		{name: "removed: initialize", method: "initialize", params: `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`, meta: statelessMeta, status: 404, code: -32601},
		{name: "removed: ping", method: "ping", meta: statelessMeta, status: 404, code: -32601},
		{name: "removed: logging/setLevel", method: "logging/setLevel", params: `{"level":"info"}`, meta: statelessMeta, status: 404, code: -32601},
		{name: "removed: resources/subscribe", method: "resources/subscribe", params: `{"uri":"test://a"}`, meta: statelessMeta, status: 404, code: -32601},
		{name: "removed: resources/unsubscribe", method: "resources/unsubscribe", params: `{"uri":"test://a"}`, meta: statelessMeta, status: 404, code: -32601},
		{name: "unknown method (the child's -32601)", method: "unknown/method", meta: statelessMeta, status: 404, code: -32601},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := 100 + i
			r := h.stateless(id, c.method, c.params, c.meta, c.hdr...)
			code, gotID := r.rpcError()
			if r.Status != c.status || code != c.code {
				t.Fatalf("status %d code %d, want %d %d; body %s", r.Status, code, c.status, c.code, r.Body)
			}
			if gotID != float64(id) {
				t.Fatalf("answer id %v, want the request's %d: %s", gotID, id, r.Body)
			}
			if c.code == -32022 {
				var e struct {
					Error struct {
						Data struct {
							Supported []string `json:"supported"`
							Requested string   `json:"requested"`
						} `json:"data"`
					} `json:"error"`
				}
				json.Unmarshal(r.Body, &e)
				if len(e.Error.Data.Supported) == 0 || e.Error.Data.Requested == "" {
					t.Fatalf("UnsupportedProtocolVersionError without supported/requested: %s", r.Body)
				}
			}
		})
	}
	// A batch is no request of this revision.
	r := h.post("", `[{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":`+statelessMeta+`}}]`, "Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list")
	if r.Status != 400 {
		t.Fatalf("batch: status %d: %s", r.Status, r.Body)
	}
}

// TestUnsupportedVersionCarriesID: a sessionful request with an unknown
// Mcp-Protocol-Version is refused with its own id, not null.
func TestUnsupportedVersionCarriesID(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	sid := h.open("2025-11-25")
	r := h.post(sid, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, "Mcp-Protocol-Version", "1999-01-01")
	if code, id := r.rpcError(); r.Status != 400 || code != -32022 || id != 7.0 {
		t.Fatalf("status %d code %d id %v: %s", r.Status, code, id, r.Body)
	}
	h.mustEcho(sid)
}

// TestStatelessResultType: results of the older child reach a stateless
// client with resultType, and cacheable ones with ttlMs and cacheScope;
// results inside an SSE stream (a call with progress) too.
func TestStatelessResultType(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: []string{echoBin, "--progress"}})
	result := func(t *testing.T, r *rpcResult, id int) map[string]any {
		t.Helper()
		m := r.response(float64(id))
		res, ok := m["result"].(map[string]any)
		if r.Status != 200 || !ok {
			t.Fatalf("status %d, no result for id %d: %s", r.Status, id, r.Body)
		}
		return res
	}
	t.Run("tools/list is cacheable", func(t *testing.T) {
		res := result(t, h.stateless(1, "tools/list", "", statelessMeta), 1)
		if res["resultType"] != "complete" || res["ttlMs"] != 0.0 || res["cacheScope"] != "private" || res["tools"] == nil {
			t.Fatalf("tools/list result %v", res)
		}
	})
	t.Run("tools/call is not", func(t *testing.T) {
		res := result(t, h.stateless(2, "tools/call", `{"name":"echo","arguments":{"text":"x"}}`, statelessMeta), 2)
		if res["resultType"] != "complete" || res["content"] == nil {
			t.Fatalf("tools/call result %v", res)
		}
		if _, ok := res["ttlMs"]; ok {
			t.Fatalf("tools/call result has ttlMs: %v", res)
		}
	})
	t.Run("server/discover", func(t *testing.T) {
		res := result(t, h.stateless(3, "server/discover", "", statelessMeta), 3)
		if res["resultType"] != "complete" || res["ttlMs"] != 0.0 || res["cacheScope"] != "private" || res["supportedVersions"] == nil {
			t.Fatalf("discover result %v", res)
		}
	})
	t.Run("result in an SSE stream", func(t *testing.T) {
		r := h.stateless(4, "tools/call", `{"name":"slow"}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"p4"}`)
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Fatalf("not an SSE answer (%s): %s", ct, r.Body)
		}
		progress := 0
		for _, m := range r.Msgs {
			if m["method"] == "notifications/progress" {
				progress++
			}
		}
		res := result(t, r, 4)
		if progress != 3 || res["resultType"] != "complete" {
			t.Fatalf("%d progress notifications, result %v", progress, res)
		}
	})
	t.Run("errors are passed through", func(t *testing.T) {
		r := h.stateless(5, "tools/call", `{"name":"nope"}`, statelessMeta)
		if code, _ := r.rpcError(); r.Status != 400 || code != -32602 {
			t.Fatalf("status %d code %d: %s", r.Status, code, r.Body)
		}
	})
}
