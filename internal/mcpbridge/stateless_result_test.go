package mcpbridge

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestCompleteResult: what the bridge adds to a child's answer for a
// stateless client, and what it leaves alone.
func TestCompleteResult(t *testing.T) {
	cases := []struct {
		name, method, in, want string
	}{
		{"plain result", "tools/call",
			`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"content":[],"resultType":"complete"}}`},
		{"cacheable result", "resources/templates/list",
			`{"jsonrpc":"2.0","id":1,"result":{"resourceTemplates":[]}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"cacheScope":"private","resourceTemplates":[],"resultType":"complete","ttlMs":0}}`},
		{"the child's hints are kept", "resources/read",
			`{"jsonrpc":"2.0","id":1,"result":{"contents":[],"ttlMs":300000,"cacheScope":"public"}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"cacheScope":"public","contents":[],"resultType":"complete","ttlMs":300000}}`},
		{"the child's resultType is kept", "tools/call",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{}}}`},
		{"null counts as absent", "tools/list",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttlMs":null}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"cacheScope":"private","resultType":"complete","tools":[],"ttlMs":0}}`},
		{"error unchanged", "tools/list",
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"<no>"}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"<no>"}}`},
		{"non-object result unchanged", "tools/call",
			`{"jsonrpc":"2.0","id":1,"result":"odd"}`,
			`{"jsonrpc":"2.0","id":1,"result":"odd"}`},
		{"strings keep <, > and &", "tools/call",
			`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"<b>&amp;</b>"}]}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"<b>&amp;</b>"}],"resultType":"complete"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string((&statelessCall{method: c.method}).answer([]byte(c.in))); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestStatelessHTTPStatus(t *testing.T) {
	cases := map[string]int{
		`{"jsonrpc":"2.0","id":1,"result":{}}`:                                     http.StatusOK,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}`:           http.StatusNotFound,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}`:           http.StatusBadRequest,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32021,"message":"x"}}`:           http.StatusBadRequest,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"x"}}`:           http.StatusBadRequest,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}`:           http.StatusOK,
		`{"jsonrpc":"2.0","id":1,"result":{"text":"\"error\":{\"code\":-32601}"}}`: http.StatusOK,
	}
	for in, want := range cases {
		if got := (&statelessCall{}).httpStatus([]byte(in)); got != want {
			t.Errorf("%s: status %d, want %d", in, got, want)
		}
	}
}

func TestTagSubscription(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
			`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"s1"}}}`},
		{`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://<x>","_meta":{"k":1}}}`,
			`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"s1","k":1},"uri":"a://<x>"}}`},
	}
	for _, c := range cases {
		if got := string(tagSubscription([]byte(c.in), json.RawMessage(`"s1"`))); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

// TestCompleteResponse: the final answer of a call that went through input
// rounds is translated like every other stateless answer: a cacheable
// result gets its caching hints too, and the child's <, > and & stay.
func TestCompleteResponse(t *testing.T) {
	raw := []byte(`{"jsonrpc":"2.0","id":"soda-7","result":{"contents":[{"uri":"x://a","text":"a<b&c"}]}}`)
	var got struct {
		ID     json.RawMessage `json:"id"`
		Result map[string]any  `json:"result"`
	}
	out := completeResponse(raw, json.RawMessage(`42`), "resources/read")
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.ID) != "42" || got.Result["resultType"] != "complete" || got.Result["ttlMs"] != 0.0 || got.Result["cacheScope"] != "private" {
		t.Errorf("completeResponse = %s", out)
	}
	if !strings.Contains(string(out), `a<b&c`) {
		t.Errorf("the child's text was escaped: %s", out)
	}
}
