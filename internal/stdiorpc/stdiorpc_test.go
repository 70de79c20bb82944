package stdiorpc

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestCheckFrame(t *testing.T) {
	for _, tc := range []struct {
		name, frame string
		ok          bool
	}{
		{"object", `{"a":"b"}`, true},
		{"a pair of surrogates", `{"a":"\ud83d\ude00"}`, true},
		{"an escaped backslash before u", `{"a":"\\ud800"}`, true},
		{"non-BMP as raw UTF-8", `{"a":"😀"}`, true},
		{"lone high surrogate", `{"a":"\ud800"}`, false},
		{"lone high surrogate at the end", `{"a":"x\uD800"}`, false},
		{"high then not low", `{"a":"\ud800\u0041"}`, false},
		{"lone low surrogate", `{"a":"\udc00"}`, false},
		{"raw 0xff", "{\"a\":\"\xff\"}", false},
		{"not JSON", `hello`, false},
		{"truncated", `{"a":`, false},
		{"deep", strings.Repeat("[", 65) + strings.Repeat("]", 65), false},
		{"as deep as allowed", strings.Repeat("[", 64) + strings.Repeat("]", 64), true},
		{"brackets in strings do not nest", `{"a":"` + strings.Repeat("[", 100) + `"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFrame([]byte(tc.frame), 64)
			if (err == nil) != tc.ok {
				t.Errorf("CheckFrame(%.40q) = %v, want ok %v", tc.frame, err, tc.ok)
			}
		})
	}
}

// TestBadFramesDoNotEndTheSession sends every kind of bad frame to a real
// go-sdk server on the transport; each gets its error response and the
// session goes on (a ping after each one is answered).
func TestBadFramesDoNotEndTheSession(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, &Transport{Reader: inR, Writer: outW, MaxFrame: 1 << 20}) }()
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	type resp struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	next := func() resp {
		t.Helper()
		got := make(chan resp, 1)
		go func() {
			var r resp
			if lines.Scan() {
				_ = json.Unmarshal(lines.Bytes(), &r)
			}
			got <- r
		}()
		select {
		case r := <-got:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no response in 10 s")
		}
		return resp{}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if r := next(); r.Error != nil || string(r.ID) != "1" {
		t.Fatalf("initialize: %+v", r)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, tc := range []struct {
		name, frame string
		code        int
		id          string
	}{
		{"not JSON", "this is not json", -32700, "null"},
		{"a batch", `[1,2]`, -32600, "null"},
		{"an object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, "null"},
		{"no version", `{"id":7,"method":"ping"}`, -32600, "7"},
		{"a number", `42`, -32600, "null"},
		{"nested 1001 deep", `{"jsonrpc":"2.0","id":8,"method":"ping","params":{"a":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}`, -32600, "null"},
		{"over the frame limit", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"` + strings.Repeat("x", 2<<20) + `"}}`, -32600, "null"},
		{"a lone surrogate", `{"jsonrpc":"2.0","id":10,"method":"ping","params":{"a":"\ud800"}}`, -32700, "null"},
		{"a raw 0xff", "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\",\"params\":{\"a\":\"\xff\"}}", -32700, "null"},
	} {
		send(tc.frame)
		r := next()
		if r.Error == nil || r.Error.Code != tc.code || string(r.ID) != tc.id {
			t.Errorf("%s: got %+v (error %+v), want code %d id %s", tc.name, r, r.Error, tc.code, tc.id)
		}
		id := 100 + i
		send(`{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"ping"}`)
		if r := next(); r.Error != nil || string(r.ID) != itoa(id) {
			t.Fatalf("after %s: ping: %+v %+v", tc.name, r, r.Error)
		}
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end at the input's end")
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
