package mcpbridge_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBodyFraming sends POST bodies whose framing is broken or that arrive
// too slowly: a malformed body is the client's error (400), only one that
// does not arrive within ReadTimeout is a 408.
func TestBodyFraming(t *testing.T) {
	h := newHarness(t, harnessOpts{readTimeout: 500 * time.Millisecond})
	control := h.open("2025-11-25")
	addr := strings.TrimPrefix(h.Base, "http://")
	tests := []struct {
		name    string
		framing string // headers that frame the body, each ending in CRLF
		body    string // sent after the headers; the connection then idles
		want    int
		message string
	}{
		{"bad chunk size", "Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n", http.StatusBadRequest, "malformed request body"},
		{"chunk size overflow", "Transfer-Encoding: chunked\r\n", "fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n", http.StatusBadRequest, "malformed request body"},
		{"chunk without CRLF", "Transfer-Encoding: chunked\r\n", "2\r\n{}XX0\r\n\r\n", http.StatusBadRequest, "malformed request body"},
		{"body slower than ReadTimeout", "Content-Length: 100\r\n", `{"jsonrpc":`, http.StatusRequestTimeout, "in time"},
		{"chunked body slower than ReadTimeout", "Transfer-Encoding: chunked\r\n", "5\r\n{\"jso", http.StatusRequestTimeout, "in time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + h.Token +
				"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" + tt.framing + "\r\n" + tt.body
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || !strings.Contains(string(body), tt.message) {
				t.Fatalf("got %d %s, want %d with %q", resp.StatusCode, body, tt.want, tt.message)
			}
			h.mustEcho(control)
		})
	}
}
