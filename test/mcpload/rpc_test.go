package main

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

func TestFindSSEResponse(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		id      int
		wantErr bool
		wantRes string
	}{
		{
			name: "notification then response, CRLF, comments",
			stream: ": keep-alive\r\n\r\n" +
				"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n" +
				"id: 7\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"ok\":true}}\r\n\r\n",
			id:      3,
			wantRes: `{"ok":true}`,
		},
		{
			name:    "multi-line data, no final blank line",
			stream:  "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":\"4\",\"result\":{}}",
			id:      4,
			wantRes: `{}`,
		},
		{
			name:    "other id only",
			stream:  "data: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\n\n",
			id:      6,
			wantErr: true,
		},
		{
			name:    "batch",
			stream:  "data: [{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1},{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":2}]\n\n",
			id:      2,
			wantRes: `2`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := findSSEResponse(bufio.NewReader(strings.NewReader(tc.stream)), tc.id)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %+v", m)
				}
				return
			}
			if err != nil {
				t.Fatalf("findSSEResponse: %v", err)
			}
			if string(m.Result) != tc.wantRes {
				t.Errorf("result = %s, want %s", m.Result, tc.wantRes)
			}
		})
	}
}

func TestCheckCall(t *testing.T) {
	ok := &rpcMessage{Result: []byte(`{"content":[{"type":"text","text":"Echo: hi"}]}`)}
	if err := checkCall(ok, "hi"); err != nil {
		t.Errorf("checkCall(ok): %v", err)
	}
	if err := checkCall(ok, "bye"); err == nil {
		t.Error("checkCall with wrong text: want an error")
	}
	isErr := &rpcMessage{Result: []byte(`{"isError":true,"content":[]}`)}
	if err := checkCall(isErr, ""); err == nil {
		t.Error("checkCall(isError): want an error")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1/mcp", "http://localhost:2/mcp", "http://[::1]:3/mcp", "http://127.9.9.9/mcp"} {
		if err := checkLoopback(u); err != nil {
			t.Errorf("checkLoopback(%q): %v", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1/mcp", "http://example.com/mcp", "ftp://127.0.0.1/"} {
		if err := checkLoopback(u); err == nil {
			t.Errorf("checkLoopback(%q): want an error", u)
		}
	}
}
