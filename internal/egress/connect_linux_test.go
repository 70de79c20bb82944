package egress

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

func TestParseRequestLine(t *testing.T) {
	tests := []struct {
		line       string
		wantTarget string // normalised host:port when accepted
		wantIP     bool
		wantStatus int    // when refused
		wantReason string // substring, when refused
	}{
		{line: "CONNECT example.com:443 HTTP/1.1", wantTarget: "example.com:443"},
		{line: "CONNECT example.com:443 HTTP/1.0", wantTarget: "example.com:443"},
		{line: "CONNECT EXAMPLE.Com:443 HTTP/1.1", wantTarget: "example.com:443"},
		{line: "CONNECT example.com.:443 HTTP/1.1", wantTarget: "example.com:443"},
		{line: "CONNECT api-2.example.com:8443 HTTP/1.1", wantTarget: "api-2.example.com:8443"},
		{line: "CONNECT 93.184.216.34:443 HTTP/1.1", wantTarget: "93.184.216.34:443", wantIP: true},
		{line: "CONNECT 127.0.0.1:80 HTTP/1.1", wantTarget: "127.0.0.1:80", wantIP: true},
		{line: "CONNECT 1.2.3.4.:443 HTTP/1.1", wantTarget: "1.2.3.4:443", wantIP: true},
		{line: "CONNECT example.com:00443 HTTP/1.1", wantTarget: "example.com:443"},

		{line: "GET http://example.com/ HTTP/1.1", wantStatus: 405, wantReason: "method GET not allowed"},
		{line: "POST / HTTP/1.1", wantStatus: 405},
		{line: "connect example.com:443 HTTP/1.1", wantStatus: 405},
		{line: "CONNECT example.com:443", wantStatus: 400, wantReason: "malformed request line"},
		{line: "CONNECT  example.com:443 HTTP/1.1", wantStatus: 400, wantReason: "malformed request line"},
		{line: "CONNECT example.com:443 HTTP/1.1 ", wantStatus: 400, wantReason: "malformed request line"},
		{line: "CONNECT\texample.com:443\tHTTP/1.1", wantStatus: 400},
		{line: "", wantStatus: 400},
		{line: "CONNECT example.com:443 HTTP/2.0", wantStatus: 400, wantReason: "unsupported protocol version"},
		{line: "CONNECT example.com:443 http/1.1", wantStatus: 400, wantReason: "unsupported protocol version"},
		{line: "CONNECT example.com HTTP/1.1", wantStatus: 400, wantReason: "missing port"},
		{line: "CONNECT example.com: HTTP/1.1", wantStatus: 400, wantReason: "missing port"},
		{line: "CONNECT example.com:0 HTTP/1.1", wantStatus: 400, wantReason: "out of range"},
		{line: "CONNECT example.com:65536 HTTP/1.1", wantStatus: 400, wantReason: "out of range"},
		{line: "CONNECT example.com:44x HTTP/1.1", wantStatus: 400, wantReason: "not a decimal number"},
		{line: "CONNECT [::1]:443 HTTP/1.1", wantStatus: 400, wantReason: "IPv6"},
		{line: "CONNECT [2606:2800::1]:443 HTTP/1.1", wantStatus: 400, wantReason: "IPv6"},
		{line: "CONNECT ::1:443 HTTP/1.1", wantStatus: 400, wantReason: `bad character \x27:\x27`},
		{line: "CONNECT fe80::1%25eth0:443 HTTP/1.1", wantStatus: 400, wantReason: "bad character"},
		{line: "CONNECT user@example.com:443 HTTP/1.1", wantStatus: 400, wantReason: `bad character \x27@\x27`},
		{line: "CONNECT exa_mple.com:443 HTTP/1.1", wantStatus: 400, wantReason: `bad character \x27_\x27`},
		{line: "CONNECT example.com%00:443 HTTP/1.1", wantStatus: 400, wantReason: `bad character \x27\x25\x27`},
		{line: "CONNECT http://example.com:443 HTTP/1.1", wantStatus: 400, wantReason: "bad character"},
		{line: "CONNECT :443 HTTP/1.1", wantStatus: 400, wantReason: "empty host"},
		{line: "CONNECT .:443 HTTP/1.1", wantStatus: 400, wantReason: "empty host"},
		{line: "CONNECT .example.com:443 HTTP/1.1", wantStatus: 400, wantReason: "leading dot"},
		{line: "CONNECT example..com:443 HTTP/1.1", wantStatus: 400, wantReason: "empty label"},
		{line: "CONNECT example.com..:443 HTTP/1.1", wantStatus: 400, wantReason: "empty label"},
		// IPv4 in forms other than canonical dotted quad.
		{line: "CONNECT 127.1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 127.0.1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 2130706433:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0x7f000001:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0X7F000001:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 017700000001:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0177.0.0.1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0x7f.0.0.1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 127.0.0.0x1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 10.0.0.010:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 256.1.1.1:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 1.2.3.4.5:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT 0x:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		{line: "CONNECT example.0x10:80 HTTP/1.1", wantStatus: 400, wantReason: "ambiguous IP literal"},
		// Names that merely contain digits are names.
		{line: "CONNECT 127.0.0.1.nip.io:80 HTTP/1.1", wantTarget: "127.0.0.1.nip.io:80"},
		{line: "CONNECT 7f000001:80 HTTP/1.1", wantTarget: "7f000001:80"},
		{line: "CONNECT 0xgg:80 HTTP/1.1", wantTarget: "0xgg:80"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			req, herr := parseRequestLine(tt.line)
			if tt.wantStatus != 0 {
				if herr == nil {
					t.Fatalf("accepted as %q, want %d", req.target(), tt.wantStatus)
				}
				if herr.status != tt.wantStatus || !strings.Contains(herr.reason, tt.wantReason) {
					t.Fatalf("refused %d %q, want %d containing %q", herr.status, herr.reason, tt.wantStatus, tt.wantReason)
				}
				return
			}
			if herr != nil {
				t.Fatalf("refused %d %q", herr.status, herr.reason)
			}
			if req.target() != tt.wantTarget || req.ip.IsValid() != tt.wantIP {
				t.Fatalf("target %q (ip %v), want %q (ip %v)", req.target(), req.ip, tt.wantTarget, tt.wantIP)
			}
		})
	}
}

func TestReadRequest(t *testing.T) {
	const limit = 128
	tests := []struct {
		name       string
		in         string
		wantLine   string
		wantRest   string // still buffered or unread after the header
		wantStatus int    // *httpError status; 0 means success or I/O error
		wantIOErr  bool
	}{
		{name: "no headers", in: "CONNECT a:1 HTTP/1.1\r\n\r\n", wantLine: "CONNECT a:1 HTTP/1.1"},
		{name: "headers", in: "CONNECT a:1 HTTP/1.1\r\nHost: b:2\r\nX: y\r\n\r\n", wantLine: "CONNECT a:1 HTTP/1.1"},
		{name: "pipelined", in: "CONNECT a:1 HTTP/1.1\r\n\r\nhello\r\n\r\nworld", wantLine: "CONNECT a:1 HTTP/1.1", wantRest: "hello\r\n\r\nworld"},
		{name: "exactly the limit", in: "CONNECT a:1 HTTP/1.1\r\nX: " + strings.Repeat("y", limit-29) + "\r\n\r\n", wantLine: "CONNECT a:1 HTTP/1.1"},
		{name: "one over the limit", in: "CONNECT a:1 HTTP/1.1\r\nX: " + strings.Repeat("y", limit-28) + "\r\n\r\n", wantStatus: 400},
		{name: "long line", in: "CONNECT " + strings.Repeat("a", 4*limit) + ":1 HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "many headers", in: "CONNECT a:1 HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 100) + "\r\n", wantStatus: 400},
		{name: "bare LF", in: "CONNECT a:1 HTTP/1.1\n\n", wantStatus: 400},
		{name: "bare LF in header", in: "CONNECT a:1 HTTP/1.1\r\nX: y\n\r\n", wantStatus: 400},
		{name: "eof", in: "", wantIOErr: true},
		{name: "eof in header", in: "CONNECT a:1 HTTP/1.1\r\nX: y", wantIOErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), limit)
			line, err := readRequest(br, limit)
			if tt.wantStatus != 0 {
				he, ok := err.(*httpError)
				if !ok || he.status != tt.wantStatus {
					t.Fatalf("readRequest = %q, %v; want status %d", line, err, tt.wantStatus)
				}
				return
			}
			if tt.wantIOErr {
				if _, ok := err.(*httpError); err == nil || ok {
					t.Fatalf("readRequest = %q, %v; want an I/O error", line, err)
				}
				return
			}
			if err != nil || line != tt.wantLine {
				t.Fatalf("readRequest = %q, %v; want %q", line, err, tt.wantLine)
			}
			rest, _ := io.ReadAll(br)
			if string(rest) != tt.wantRest {
				t.Fatalf("rest = %q, want %q", rest, tt.wantRest)
			}
		})
	}
}
