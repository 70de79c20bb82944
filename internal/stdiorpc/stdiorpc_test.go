package stdiorpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// checkFrameCase is a frame and whether CheckFrame accepts it.
type checkFrameCase struct {
	name, frame string
	ok          bool
}

// checkFrameCases are TestCheckFrame's table (at depth 64) and seeds of
// FuzzCheckFrame.
func checkFrameCases() []checkFrameCase {
	return []checkFrameCase{
		{"object", `{"a":"b"}`, true},
		{"a pair of surrogates", `{"a":"\ud83d\ude00"}`, true},
		{"an escaped backslash before u", `{"a":"\\ud800"}`, true},
		{"non-BMP as raw UTF-8", `{"a":"😀"}`, true},
		{"lone high surrogate", `{"a":"\ud800"}`, false},
		{"lone high surrogate at the end", `{"a":"x\uD800"}`, false},
		{"high then not low", `{"a":"\ud800\u0041"}`, false},
		{"lone low surrogate", `{"a":"\udc00"}`, false},
		{"raw 0xff", "{\"a\":\"\xff\"}", false},
		{"a number past a float64", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, false},
		{"a huge integer", `2` + strings.Repeat("0", 400), false},
		{"a tiny number rounds to zero", `{"a":1e-400}`, true},
		{"numbers in strings are not numbers", `{"a":"1e400"}`, true},
		{"not JSON", `hello`, false},
		{"truncated", `{"a":`, false},
		{"deep", strings.Repeat("[", 65) + strings.Repeat("]", 65), false},
		{"as deep as allowed", strings.Repeat("[", 64) + strings.Repeat("]", 64), true},
		{"brackets in strings do not nest", `{"a":"` + strings.Repeat("[", 100) + `"}`, true},
	}
}

func TestCheckFrame(t *testing.T) {
	for _, tc := range checkFrameCases() {
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
		{"an id past a float64", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, -32600, "null"},
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

// FuzzCheckFrame compares CheckFrame with encoding/json: a frame is
// accepted exactly when it is UTF-8, valid JSON, nested at most maxDepth
// deep, and decodes (no number past a float64) without a U+FFFD that it
// does not hold itself (the replacement encoding/json makes for a lone
// surrogate). A refusal is a *FrameError at a byte of the frame, Invalid
// only for a frame too deep or with a number past a float64.
func FuzzCheckFrame(f *testing.F) {
	for _, tc := range checkFrameCases() {
		f.Add([]byte(tc.frame))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	f.Add([]byte(`{"a":["\ud83d\ude00","\u00e9\n",{"b":[null,true,-1.5e3]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxDepth = 8
		err := CheckFrame(b, maxDepth)
		var fe *FrameError
		if err != nil && (!errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > len(b)) {
			t.Fatalf("CheckFrame(%q) = %v", b, err)
		}
		good := utf8.Valid(b) && json.Valid(b)
		depth, replaced, decodes := 0, false, false
		if good {
			depth, replaced = jsonDepthAndReplacement(t, b)
			var v any
			decodes = json.Unmarshal(b, &v) == nil // false for a number past a float64
		}
		ownFFFD := bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) || bytes.ContainsRune(b, utf8.RuneError)
		switch {
		case err == nil && (!good || depth > maxDepth):
			t.Fatalf("CheckFrame(%q) accepts it: JSON %v, depth %d", b, good, depth)
		case err == nil && replaced && !ownFFFD:
			t.Fatalf("CheckFrame(%q) accepts what encoding/json decodes with a U+FFFD", b)
		case err != nil && good && depth <= maxDepth && !replaced && decodes:
			t.Fatalf("CheckFrame(%q) = %v, for a frame encoding/json decodes as sent", b, err)
		case fe != nil && fe.Invalid && !(good && (depth > maxDepth || !decodes)):
			t.Fatalf("CheckFrame(%q) = %v (invalid), for a frame neither too deep nor with a number past a float64", b, err)
		}
		if err == nil {
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("CheckFrame(%q) accepts what encoding/json refuses: %v", b, err)
			}
		}
	})
}

// jsonDepthAndReplacement decodes the valid JSON b token by token and
// returns its nesting depth and whether a string of it (key or value)
// decodes with a U+FFFD.
func jsonDepthAndReplacement(t *testing.T, b []byte) (depth int, replaced bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	d := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return depth, replaced
		}
		if err != nil {
			t.Fatalf("decode %q: %v", b, err)
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '[' || tok == '{' {
				d++
				depth = max(depth, d)
			} else {
				d--
			}
		case string:
			replaced = replaced || strings.ContainsRune(tok, utf8.RuneError)
		}
	}
}
