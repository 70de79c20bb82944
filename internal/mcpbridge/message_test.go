package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// parseMessageCase is a message and what parseMessage makes of it.
type parseMessageCase struct {
	name       string
	raw        string
	wantKind   kind
	wantID     string
	wantMethod string
	wantErr    string // substring; "" means no error
	notObject  bool   // the error must be errNotObject
}

// parseMessageCases are TestParseMessageKinds's table and seeds of
// FuzzSplitBody.
func parseMessageCases() []parseMessageCase {
	return []parseMessageCase{
		{name: "request", raw: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, wantKind: kindRequest, wantID: "n:1", wantMethod: "tools/list"},
		{name: "request with string id", raw: `{"jsonrpc":"2.0","id":"abc","method":"ping","params":{}}`, wantKind: kindRequest, wantID: "s:abc", wantMethod: "ping"},
		{name: "notification", raw: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, wantKind: kindNotification, wantMethod: "notifications/initialized"},
		{name: "notification with null id", raw: `{"jsonrpc":"2.0","id":null,"method":"notifications/initialized"}`, wantKind: kindNotification, wantMethod: "notifications/initialized"},
		{name: "response with result", raw: `{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}`, wantKind: kindResponse, wantID: "n:7"},
		{name: "response with null result", raw: `{"jsonrpc":"2.0","id":7,"result":null}`, wantKind: kindResponse, wantID: "n:7"},
		{name: "response with error", raw: `{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"no"}}`, wantKind: kindResponse, wantID: "s:x"},
		{name: "error with null id", raw: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`, wantKind: kindResponse},
		{name: "error without id", raw: `{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}}`, wantKind: kindResponse},
		{name: "unknown members are ignored", raw: `{"jsonrpc":"2.0","id":1,"method":"x","extra":[1,2]}`, wantKind: kindRequest, wantID: "n:1", wantMethod: "x"},

		{name: "no jsonrpc", raw: `{"id":1,"method":"ping"}`, wantErr: `"jsonrpc" must be "2.0"`},
		{name: "jsonrpc 1.0", raw: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, wantErr: `"jsonrpc" must be "2.0"`},
		{name: "jsonrpc number", raw: `{"jsonrpc":2.0,"id":1,"method":"ping"}`, wantErr: "malformed JSON-RPC message"},
		{name: "array", raw: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, notObject: true},
		{name: "string", raw: `"hello"`, notObject: true},
		{name: "number", raw: `42`, notObject: true},
		{name: "json null", raw: `null`, wantErr: `"jsonrpc" must be "2.0"`},
		{name: "not JSON", raw: `{"jsonrpc":`, wantErr: "malformed JSON-RPC message"},
		{name: "object without method or result", raw: `{"jsonrpc":"2.0","id":1}`, wantErr: "neither request, notification nor response"},
		{name: "result with null id", raw: `{"jsonrpc":"2.0","id":null,"result":{}}`, wantErr: "neither request, notification nor response"},
		{name: "empty object", raw: `{}`, wantErr: `"jsonrpc" must be "2.0"`},
		{name: "boolean id", raw: `{"jsonrpc":"2.0","id":true,"method":"ping"}`, wantErr: "id must be a string or a number"},
		{name: "object id", raw: `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, wantErr: "id must be a string or a number"},
		{name: "method not a string", raw: `{"jsonrpc":"2.0","id":1,"method":5}`, wantErr: "malformed JSON-RPC message"},
	}
}

func TestParseMessageKinds(t *testing.T) {
	for _, tt := range parseMessageCases() {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseMessage([]byte(tt.raw))
			if tt.notObject {
				if !errors.Is(err, errNotObject) {
					t.Fatalf("parseMessage(%s) error = %v, want errNotObject", tt.raw, err)
				}
				return
			}
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("parseMessage(%s) = %v message, want an error mentioning %q", tt.raw, m.kind, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("parseMessage(%s) error %q does not mention %q", tt.raw, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMessage(%s): unexpected error: %v", tt.raw, err)
			}
			if m.kind != tt.wantKind || m.id != tt.wantID || m.method != tt.wantMethod {
				t.Errorf("parseMessage(%s) = (kind %v, id %q, method %q), want (%v, %q, %q)", tt.raw, m.kind, m.id, m.method, tt.wantKind, tt.wantID, tt.wantMethod)
			}
			if string(m.raw) != tt.raw {
				t.Errorf("raw = %s, want the input unchanged", m.raw)
			}
		})
	}
}

func TestMessageKindString(t *testing.T) {
	for k, want := range map[kind]string{kindInvalid: "invalid", kindRequest: "request", kindNotification: "notification", kindResponse: "response", kind(99): "invalid"} {
		if got := k.String(); got != want {
			t.Errorf("kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestCanonicalID(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    string
		wantErr bool
	}{
		{name: "number", raw: `1`, want: "n:1"},
		{name: "string of digits stays distinct from number", raw: `"1"`, want: "s:1"},
		{name: "zero", raw: `0`, want: "n:0"},
		{name: "negative", raw: `-5`, want: "n:-5"},
		{name: "surrounding blanks", raw: " 42 ", want: "n:42"},
		// 1.0 is kept apart from 1: ids are matched by their spelling as a
		// number, and JSON-RPC says ids SHOULD NOT have fractional parts.
		{name: "fraction is not folded into an integer", raw: `1.0`, want: "n:1.0"},
		{name: "exponent is kept as written", raw: `1e2`, want: "n:1e2"},
		{name: "beyond int64 is kept as written", raw: `12345678901234567890`, want: "n:12345678901234567890"},
		{name: "string", raw: `"abc"`, want: "s:abc"},
		{name: "empty string", raw: `""`, want: "s:"},
		{name: "escapes are decoded", raw: `"\u0061b\"c"`, want: `s:ab"c`},
		{name: "string that looks like a key", raw: `"n:1"`, want: "s:n:1"},
		{name: "empty", raw: ``, wantErr: true},
		{name: "blank", raw: `  `, wantErr: true},
		{name: "null", raw: `null`, wantErr: true},
		{name: "bool", raw: `false`, wantErr: true},
		{name: "array", raw: `[1]`, wantErr: true},
		{name: "object", raw: `{}`, wantErr: true},
		{name: "bad string", raw: `"abc`, wantErr: true},
		{name: "bad number", raw: `1x`, wantErr: true},
		{name: "lone minus", raw: `-`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := canonicalID(json.RawMessage(tt.raw))
			if tt.wantErr {
				if err == nil {
					t.Errorf("canonicalID(%s) = %q, want an error", tt.raw, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("canonicalID(%s): unexpected error: %v", tt.raw, err)
			}
			if got != tt.want {
				t.Errorf("canonicalID(%s) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}

	t.Run("distinct keys", func(t *testing.T) {
		pairs := [][2]string{{`1`, `"1"`}, {`1`, `1.0`}, {`"a"`, `"A"`}, {`0`, `"0"`}}
		for _, p := range pairs {
			a, _ := canonicalID(json.RawMessage(p[0]))
			b, _ := canonicalID(json.RawMessage(p[1]))
			if a == b {
				t.Errorf("ids %s and %s share the key %q; they must stay distinct", p[0], p[1], a)
			}
		}
	})
}

func TestParseMessageFields(t *testing.T) {
	const pv = "2025-06-18"
	tests := []struct {
		name              string
		raw               string
		wantProgressToken string
		wantRequestID     string
		wantProtocol      string
	}{
		{
			name:              "request progress token in _meta",
			raw:               `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"tok"}}}`,
			wantProgressToken: "s:tok",
		},
		{
			name:              "numeric progress token",
			raw:               `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":7}}}`,
			wantProgressToken: "n:7",
		},
		{
			name: "request progress token outside _meta is ignored",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"progressToken":"tok"}}`,
		},
		{
			name: "invalid progress token is ignored",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":{"x":1}}}}`,
		},
		{
			name: "null _meta",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":null}}`,
		},
		{
			name:              "progress notification token in params",
			raw:               `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1,"total":3}}`,
			wantProgressToken: "s:tok",
		},
		{
			name:              "progress notification numeric token",
			raw:               `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":12,"progress":1}}`,
			wantProgressToken: "n:12",
		},
		{
			name: "other notification's progressToken is ignored",
			raw:  `{"jsonrpc":"2.0","method":"notifications/message","params":{"progressToken":"tok"}}`,
		},
		{
			name:          "cancelled requestId",
			raw:           `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"user"}}`,
			wantRequestID: "n:5",
		},
		{
			name:          "cancelled string requestId",
			raw:           `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"5"}}`,
			wantRequestID: "s:5",
		},
		{
			name: "requestId of another method is ignored",
			raw:  `{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":5}}`,
		},
		{
			name:         "protocol version in _meta",
			raw:          `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` + pv + `"}}}`,
			wantProtocol: pv,
		},
		{
			name:              "protocol version and progress token together",
			raw:               `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"` + pv + `"}}}`,
			wantProgressToken: "s:p",
			wantProtocol:      pv,
		},
		{
			name: "protocolVersion outside _meta is not the meta version",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + pv + `"}}`,
		},
		{
			name: "no params",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		},
		{
			name: "null params",
			raw:  `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseMessage([]byte(tt.raw))
			if err != nil {
				t.Fatalf("parseMessage(%s): unexpected error: %v", tt.raw, err)
			}
			if m.progressToken != tt.wantProgressToken {
				t.Errorf("progressToken = %q, want %q", m.progressToken, tt.wantProgressToken)
			}
			if m.requestID != tt.wantRequestID {
				t.Errorf("requestID = %q, want %q", m.requestID, tt.wantRequestID)
			}
			if m.protocolVersion != tt.wantProtocol {
				t.Errorf("protocolVersion = %q, want %q", m.protocolVersion, tt.wantProtocol)
			}
		})
	}
}

// splitBodyCase is an HTTP body and what splitBody makes of it.
type splitBodyCase struct {
	name      string
	body      string
	wantBatch bool
	wantRaws  []string // raw bytes of each message
	wantKinds []kind
	wantErr   string
}

// splitBodyCases are TestSplitBody's table and seeds of FuzzSplitBody.
func splitBodyCases() []splitBodyCase {
	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	const note = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	return []splitBodyCase{
		{name: "single", body: ping, wantRaws: []string{ping}, wantKinds: []kind{kindRequest}},
		{name: "single with surrounding blanks", body: "\n  " + ping + " \r\n", wantRaws: []string{ping}, wantKinds: []kind{kindRequest}},
		{name: "single kept byte for byte", body: `{ "jsonrpc": "2.0", "id": 1, "method": "ping" }`, wantRaws: []string{`{ "jsonrpc": "2.0", "id": 1, "method": "ping" }`}, wantKinds: []kind{kindRequest}},
		{
			name:      "single with newlines compacted",
			body:      "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"ping\"\n}",
			wantRaws:  []string{ping},
			wantKinds: []kind{kindRequest},
		},
		{
			name:      "CRLF compacted",
			body:      "{\r\n\"jsonrpc\":\"2.0\",\r\n\"method\":\"notifications/initialized\"}",
			wantRaws:  []string{note},
			wantKinds: []kind{kindNotification},
		},
		{
			name:      "escaped newline in a string is not a line break",
			body:      `{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"a\nb"}}`,
			wantRaws:  []string{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"a\nb"}}`},
			wantKinds: []kind{kindRequest},
		},
		{
			name:      "batch",
			body:      "[" + ping + ", " + note + "]",
			wantBatch: true,
			wantRaws:  []string{ping, note},
			wantKinds: []kind{kindRequest, kindNotification},
		},
		{
			name:      "batch of one",
			body:      "[" + ping + "]",
			wantBatch: true,
			wantRaws:  []string{ping},
			wantKinds: []kind{kindRequest},
		},
		{
			name:      "batch items with newlines compacted",
			body:      "[\n  {\n    \"jsonrpc\": \"2.0\",\n    \"id\": 1,\n    \"method\": \"ping\"\n  },\n  " + note + "\n]",
			wantBatch: true,
			wantRaws:  []string{ping, note},
			wantKinds: []kind{kindRequest, kindNotification},
		},
		{name: "empty body", body: "", wantErr: "empty body"},
		{name: "blank body", body: " \n\t", wantErr: "empty body"},
		{name: "empty batch", body: "[]", wantBatch: true, wantErr: "empty JSON-RPC batch"},
		{name: "empty batch with blanks", body: "[ \n ]", wantBatch: true, wantErr: "empty JSON-RPC batch"},
		{name: "malformed batch", body: "[" + ping + ",", wantBatch: true, wantErr: "malformed JSON-RPC batch"},
		{name: "bad batch item reports its index", body: "[" + ping + `,{"jsonrpc":"1.0","id":2,"method":"ping"}]`, wantBatch: true, wantErr: `batch item 1: malformed JSON-RPC message: "jsonrpc" must be "2.0"`},
		{name: "non-object batch item", body: "[" + ping + "," + note + ",3]", wantBatch: true, wantErr: "batch item 2: message is not a JSON object"},
		{name: "nested batch", body: "[[" + ping + "]]", wantBatch: true, wantErr: "batch item 0: message is not a JSON object"},
		{name: "malformed single", body: `{"jsonrpc":"2.0",`, wantErr: "malformed JSON-RPC message"},
		{name: "single scalar", body: `"ping"`, wantErr: "not a JSON object"},
	}
}

func TestSplitBody(t *testing.T) {
	for _, tt := range splitBodyCases() {
		t.Run(tt.name, func(t *testing.T) {
			msgs, batch, err := splitBody([]byte(tt.body))
			if batch != tt.wantBatch {
				t.Errorf("splitBody(%q) batch = %v, want %v", tt.body, batch, tt.wantBatch)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("splitBody(%q) error = %v, want one containing %q", tt.body, err, tt.wantErr)
				}
				if msgs != nil {
					t.Errorf("splitBody(%q) returned %d messages with an error", tt.body, len(msgs))
				}
				return
			}
			if err != nil {
				t.Fatalf("splitBody(%q): unexpected error: %v", tt.body, err)
			}
			if len(msgs) != len(tt.wantRaws) {
				t.Fatalf("splitBody(%q) gave %d messages, want %d", tt.body, len(msgs), len(tt.wantRaws))
			}
			for i, m := range msgs {
				if string(m.raw) != tt.wantRaws[i] {
					t.Errorf("message %d raw = %q, want %q", i, m.raw, tt.wantRaws[i])
				}
				if bytes.ContainsAny(m.raw, "\r\n") {
					t.Errorf("message %d raw %q holds a line break; stdio framing needs one line", i, m.raw)
				}
				if m.kind != tt.wantKinds[i] {
					t.Errorf("message %d kind = %v, want %v", i, m.kind, tt.wantKinds[i])
				}
			}
		})
	}
}

func TestRawID(t *testing.T) {
	tests := []struct {
		key  string
		want string
	}{
		{"n:1", `1`},
		{"n:-5", `-5`},
		{"n:1.0", `1.0`},
		{"s:1", `"1"`},
		{"s:", `""`},
		{`s:a"b\c`, `"a\"b\\c"`},
		{"s:héllo", `"héllo"`},
		{"", `null`},
		{"s", `null`},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := string(rawID(tt.key)); got != tt.want {
				t.Errorf("rawID(%q) = %s, want %s", tt.key, got, tt.want)
			}
		})
	}

	// canonicalID and rawID are inverses on every valid id.
	for _, raw := range []string{`0`, `1`, `-42`, `1.0`, `1e3`, `12345678901234567890`, `"1"`, `""`, `"abc"`, `"a\"b"`, `"<tag> & 'q'"`, `"日本"`, `"line\nbreak"`} {
		t.Run("round trip "+raw, func(t *testing.T) {
			key, err := canonicalID(json.RawMessage(raw))
			if err != nil {
				t.Fatalf("canonicalID(%s): %v", raw, err)
			}
			back := rawID(key)
			if !json.Valid(back) {
				t.Fatalf("rawID(%q) = %s is not valid JSON", key, back)
			}
			key2, err := canonicalID(back)
			if err != nil {
				t.Fatalf("canonicalID(rawID(%q) = %s): %v", key, back, err)
			}
			if key2 != key {
				t.Errorf("round trip of %s: key %q -> %s -> key %q", raw, key, back, key2)
			}
		})
	}
}

func TestErrorResponseID(t *testing.T) {
	tests := []struct {
		name string
		id   json.RawMessage
		code int
		msg  string
		data any
		want string
	}{
		{
			name: "number id",
			id:   json.RawMessage(`7`), code: codeInvalidRequest, msg: "bad request",
			want: `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"bad request"}}`,
		},
		{
			name: "string id",
			id:   json.RawMessage(`"abc"`), code: codeTimeout, msg: "timed out",
			want: `{"jsonrpc":"2.0","id":"abc","error":{"code":-32001,"message":"timed out"}}`,
		},
		{
			name: "nil id becomes null",
			id:   nil, code: codeParseError, msg: "parse error",
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
		},
		{
			name: "explicit null id",
			id:   json.RawMessage(`null`), code: codeInternalError, msg: "x",
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"x"}}`,
		},
		{
			name: "with data",
			id:   json.RawMessage(`1`), code: codeUnsupportedVersion, msg: "unsupported", data: map[string]any{"supported": []string{"2025-06-18"}},
			want: `{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported","data":{"supported":["2025-06-18"]}}}`,
		},
		{
			name: "message is JSON-escaped",
			id:   json.RawMessage(`2`), code: codeServerGone, msg: "said \"bye\"\n",
			want: `{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"said \"bye\"\n"}}`,
		},
		{
			name: "id from rawID",
			id:   rawID("s:x"), code: codeMethodNotFound, msg: "no such method",
			want: `{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"no such method"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorResponseID(tt.id, tt.code, tt.msg, tt.data)
			if string(got) != tt.want {
				t.Errorf("errorResponseID = %s\nwant %s", got, tt.want)
			}
			m, err := parseMessage(got)
			if err != nil || m.kind != kindResponse {
				t.Errorf("errorResponseID output does not parse as a response: kind %v, err %v", m.kind, err)
			}
		})
	}
}

func TestRewriteID(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		id   string
		want map[string]any // the rewritten message, decoded; nil: msg unchanged
	}{
		{
			name: "response string id to number",
			msg:  `{"jsonrpc":"2.0","id":"bridge-1","result":{"content":[{"type":"text","text":"hi"}]}}`,
			id:   `5`,
			want: map[string]any{"jsonrpc": "2.0", "id": 5.0, "result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "hi"}}}},
		},
		{
			name: "request number id to string",
			msg:  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
			id:   `"abc"`,
			want: map[string]any{"jsonrpc": "2.0", "id": "abc", "method": "tools/call", "params": map[string]any{"name": "echo"}},
		},
		{
			name: "error response",
			msg:  `{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"no"}}`,
			id:   `"1"`,
			want: map[string]any{"jsonrpc": "2.0", "id": "1", "error": map[string]any{"code": -32601.0, "message": "no"}},
		},
		{
			name: "message without id gains one",
			msg:  `{"jsonrpc":"2.0","method":"x"}`,
			id:   `3`,
			want: map[string]any{"jsonrpc": "2.0", "id": 3.0, "method": "x"},
		},
		{
			name: "not JSON is returned unchanged",
			msg:  `{"jsonrpc":`,
			id:   `3`,
		},
		{
			name: "array is returned unchanged",
			msg:  `[1,2]`,
			id:   `3`,
		},
		{
			name: "invalid new id leaves msg unchanged",
			msg:  `{"jsonrpc":"2.0","id":1,"result":{}}`,
			id:   `{bad`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rewriteID([]byte(tt.msg), json.RawMessage(tt.id))
			if tt.want == nil {
				if string(got) != tt.msg {
					t.Errorf("rewriteID(%s, %s) = %s, want the message unchanged", tt.msg, tt.id, got)
				}
				return
			}
			if bytes.ContainsAny(got, "\r\n") {
				t.Errorf("rewriteID output %q holds a line break", got)
			}
			var dec map[string]any
			if err := json.Unmarshal(got, &dec); err != nil {
				t.Fatalf("rewriteID(%s, %s) = %s is not a JSON object: %v", tt.msg, tt.id, got, err)
			}
			if !reflect.DeepEqual(dec, tt.want) {
				t.Errorf("rewriteID(%s, %s) = %s\ndecoded %v\nwant    %v", tt.msg, tt.id, got, dec, tt.want)
			}
			m, err := parseMessage(got)
			if err != nil {
				t.Fatalf("rewritten message does not parse: %v", err)
			}
			wantKey, _ := canonicalID(json.RawMessage(tt.id))
			if m.id != wantKey {
				t.Errorf("rewritten message id key = %q, want %q", m.id, wantKey)
			}
		})
	}
}

// FuzzSplitBody checks the envelope of what clients send: a body is
// split into messages only when each is a JSON-RPC 2.0 object, each kept
// byte for byte or compacted, never with a line break (stdio framing is
// one message a line); its kind agrees with its fields (a request has an
// id and a method, a notification a method and no id, a response no
// method); its id comes back from rawID as the same id, and an error
// response for it is a response with that id; a second reading of its
// raw bytes finds the same.
func FuzzSplitBody(f *testing.F) {
	for _, tt := range parseMessageCases() {
		f.Add([]byte(tt.raw))
	}
	for _, tt := range splitBodyCases() {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, batch, err := splitBody(body)
		if err != nil {
			if msgs != nil {
				t.Fatalf("splitBody(%q) = %d messages and %v", body, len(msgs), err)
			}
			return
		}
		if trimmed := bytes.TrimSpace(body); batch != (trimmed[0] == '[') || !batch && len(msgs) != 1 || len(msgs) == 0 {
			t.Fatalf("splitBody(%q) = %d messages, batch %v", body, len(msgs), batch)
		}
		for i, m := range msgs {
			if bytes.ContainsAny(m.raw, "\r\n") || !json.Valid(m.raw) {
				t.Fatalf("splitBody(%q): message %d is %q", body, i, m.raw)
			}
			switch {
			case m.kind == kindRequest && (m.id == "" || m.method == ""),
				m.kind == kindNotification && (m.id != "" || m.method == ""),
				m.kind == kindResponse && m.method != "",
				m.kind == kindInvalid:
				t.Fatalf("splitBody(%q): message %d is a %v with id %q, method %q", body, i, m.kind, m.id, m.method)
			}
			again, err := parseMessage(m.raw)
			if err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("splitBody(%q): message %d read again: %+v, %v; was %+v", body, i, again, err, m)
			}
			if m.id == "" {
				continue
			}
			raw := rawID(m.id)
			if id, err := canonicalID(raw); err != nil || id != m.id {
				t.Fatalf("splitBody(%q): id %q as JSON %s reads back as %q, %v", body, m.id, raw, id, err)
			}
			resp, err := parseMessage(errorResponseID(raw, codeInvalidRequest, "no", nil))
			if err != nil || resp.kind != kindResponse || resp.id != m.id {
				t.Fatalf("splitBody(%q): the error response for id %q is %+v, %v", body, m.id, resp, err)
			}
		}
	})
}
