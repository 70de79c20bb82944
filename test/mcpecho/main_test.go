package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// newTestServer returns a server writing to out, recording exit codes.
func newTestServer(o options, out *bytes.Buffer, stderr *bytes.Buffer, exits *[]int) *server {
	return &server{
		opts:   o,
		out:    bufio.NewWriter(out),
		stderr: stderr,
		exit:   func(code int) { *exits = append(*exits, code) },
	}
}

// decodeLines parses each non-empty output line as JSON (or keeps it raw if
// it is not JSON).
func decodeLines(t *testing.T, s string) []any {
	t.Helper()
	var got []any
	for _, l := range strings.Split(s, "\n") {
		if l == "" {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			got = append(got, l)
			continue
		}
		got = append(got, v)
	}
	return got
}

func mustJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad expected JSON %q: %v", s, err)
	}
	return v
}

func TestHandleLine(t *testing.T) {
	initResult := func(v string) string {
		return `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"` + v +
			`","capabilities":{"tools":{}},"serverInfo":{"name":"mcpecho","version":"1.0.0"}}}`
	}
	tests := []struct {
		name  string
		opts  options
		in    []string
		want  []string // expected output lines: JSON, or raw text when not JSON
		exits []int
	}{
		{
			name: "initialize echoes a known version",
			in:   []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
			want: []string{initResult("2025-03-26")},
		},
		{
			name: "initialize answers latest for an unknown version",
			in:   []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}`},
			want: []string{initResult("2025-11-25")},
		},
		{
			name: "notifications get no answer",
			in: []string{
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
			},
		},
		{
			name: "ping with a string id",
			in:   []string{`{"jsonrpc":"2.0","id":"abc","method":"ping"}`},
			want: []string{`{"jsonrpc":"2.0","id":"abc","result":{}}`},
		},
		{
			name: "tools/list",
			in:   []string{`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`},
			want: []string{`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","description":"Echoes back the given text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}]}}`},
		},
		{
			name: "tools/call echo",
			in:   []string{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"héllo"}}}`},
			want: []string{`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"héllo"}]}}`},
		},
		{
			name: "unknown method",
			in:   []string{`{"jsonrpc":"2.0","id":4,"method":"resources/list"}`},
			want: []string{`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"method not found: resources/list"}}`},
		},
		{
			name: "unknown tool",
			in:   []string{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"crash"}}`},
			want: []string{`{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"unknown tool: crash"}}`},
		},
		{
			name: "parse error",
			in:   []string{`{not json`},
			want: []string{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: invalid character 'n' looking for beginning of object key string"}}`},
		},
		{
			name: "blank lines and CRLF are ignored",
			in:   []string{"", "\r", `{"jsonrpc":"2.0","id":6,"method":"ping"}` + "\r"},
			want: []string{`{"jsonrpc":"2.0","id":6,"result":{}}`},
		},
		{
			name: "batch",
			in:   []string{`[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":8,"method":"nope"}]`},
			want: []string{`[{"jsonrpc":"2.0","id":7,"result":{}},{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"method not found: nope"}}]`},
		},
		{
			name: "responses from the client are ignored",
			in:   []string{`{"jsonrpc":"2.0","id":9,"result":{}}`},
		},
		{
			name:  "exit before init",
			opts:  options{exitBeforeInit: true},
			in:    []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`},
			exits: []int{3},
		},
		{
			name:  "crash on call",
			opts:  options{crashOnCall: true},
			in:    []string{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crash"}}`},
			exits: []int{7},
		},
		{
			name: "hang tool never answers",
			opts: options{hangTool: true},
			in: []string{
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`,
				`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
			},
			want: []string{`{"jsonrpc":"2.0","id":2,"result":{}}`},
		},
		{
			name: "garbage before every response",
			opts: options{garbage: true},
			in:   []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"method":"ping"}`},
			want: []string{
				"garbage!!! this is not JSON", `{"jsonrpc":"2.0","id":1,"result":{}}`,
				"garbage!!! this is not JSON", `{"jsonrpc":"2.0","id":2,"result":{}}`,
			},
		},
		{
			name: "progress",
			opts: options{progress: true, progressDelay: time.Millisecond},
			in:   []string{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"tok"}}}`},
			want: []string{
				`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1,"total":3,"message":"step 1 of 3"}}`,
				`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":2,"total":3,"message":"step 2 of 3"}}`,
				`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":3,"total":3,"message":"step 3 of 3"}}`,
				`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"slow done"}]}}`,
			},
		},
		{
			name: "notify",
			opts: options{notify: true},
			in: []string{
				`{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"test://b"}}`,
				`{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"test://a"}}`,
				`{"jsonrpc":"2.0","id":3,"method":"resources/unsubscribe","params":{"uri":"test://b"}}`,
				`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"notify"}}`,
			},
			want: []string{
				`{"jsonrpc":"2.0","id":1,"result":{}}`,
				`{"jsonrpc":"2.0","id":2,"result":{}}`,
				`{"jsonrpc":"2.0","id":3,"result":{}}`,
				`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
				`{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}`,
				`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"notify called"}}`,
				`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://a"}}`,
				`{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"subscribed: test://a"}]}}`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var exits []int
			s := newTestServer(tc.opts, &out, &errb, &exits)
			for _, l := range tc.in {
				s.handleLine([]byte(l + "\n"))
			}
			s.wg.Wait()
			got := decodeLines(t, out.String())
			var want []any
			for _, w := range tc.want {
				if strings.HasPrefix(w, "{") || strings.HasPrefix(w, "[") {
					want = append(want, mustJSON(t, w))
				} else {
					want = append(want, w)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("output mismatch\n got: %v\nwant: %v", got, want)
			}
			if !reflect.DeepEqual(exits, tc.exits) {
				t.Errorf("exits = %v, want %v", exits, tc.exits)
			}
		})
	}
}

func TestRunStderrFloodAndEOF(t *testing.T) {
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	var out, errb bytes.Buffer
	if err := run(options{stderrFlood: 1000}, in, &out, &errb); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := strings.Count(errb.String(), "\n"); n != 1000 {
		t.Errorf("stderr lines = %d, want 1000", n)
	}
	if got := strings.TrimSpace(out.String()); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("stdout = %q", got)
	}
}
