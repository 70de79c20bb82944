package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// requestLineCase is a request line and what parseRequestLine makes of it.
type requestLineCase struct {
	line       string
	wantTarget string // normalised host:port when accepted
	wantIP     bool
	wantStatus int    // when refused
	wantReason string // substring, when refused
}

// requestLineCases are TestParseRequestLine's table and seeds of
// FuzzConnectRequest.
func requestLineCases() []requestLineCase {
	return []requestLineCase{
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
}

func TestParseRequestLine(t *testing.T) {
	for _, tt := range requestLineCases() {
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

// readRequestCase is a request header and what readRequest makes of it.
type readRequestCase struct {
	name       string
	in         string
	wantLine   string
	wantRest   string // still buffered or unread after the header
	wantStatus int    // *httpError status; 0 means success or I/O error
	wantIOErr  bool
}

// readRequestCases are TestReadRequest's table, for a header limit of
// limit bytes, and seeds of FuzzConnectRequest.
func readRequestCases(limit int) []readRequestCase {
	return []readRequestCase{
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
}

func TestReadRequest(t *testing.T) {
	const limit = 128
	for _, tt := range readRequestCases(limit) {
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

// FuzzConnectRequest reads and parses request headers as the proxy does
// (readRequest, then parseRequestLine). A header is taken only whole: at
// most the limit, every line ended by CRLF, up to the first empty line,
// what follows left for the target. A refusal is a 400 or a 405 whose
// reason (audited) is printable ASCII. An accepted target is normalised:
// its host:port parses back to the same request; the host is lower case,
// without a trailing dot, of letters, digits, dots and dashes; an IP
// literal only as a canonical dotted quad (and then ip is set), never a
// name that inet_aton could read as an address.
func FuzzConnectRequest(f *testing.F) {
	const limit = 128
	for _, tt := range requestLineCases() {
		f.Add([]byte(tt.line + "\r\n\r\n"))
	}
	for _, tt := range readRequestCases(limit) {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), limit)
		line, err := readRequest(br, limit)
		if err != nil {
			var he *httpError
			switch {
			case errors.As(err, &he):
				if he.status != 400 || !printableASCII(he.reason) {
					t.Fatalf("readRequest(%q): refused %d %q", in, he.status, he.reason)
				}
			case !errors.Is(err, io.EOF) || !strings.HasPrefix(err.Error(), "read request"):
				t.Fatalf("readRequest(%q): %v", in, err)
			}
			return
		}
		rest, _ := io.ReadAll(br)
		header := string(in[:len(in)-len(rest)])
		if len(header) > limit || !strings.HasPrefix(header, line+"\r\n") ||
			strings.Index(header[len(line):], "\r\n\r\n") != len(header)-len(line)-4 ||
			strings.Count(header, "\n") != strings.Count(header, "\r\n") {
			t.Fatalf("readRequest(%q) took the header %q (line %q)", in, header, line)
		}
		req, herr := parseRequestLine(line)
		if herr != nil {
			if herr.status != 400 && herr.status != 405 || !printableASCII(herr.reason) {
				t.Fatalf("parseRequestLine(%q): refused %d %q", line, herr.status, herr.reason)
			}
			return
		}
		if !strings.HasPrefix(line, "CONNECT ") || !strings.HasSuffix(line, " HTTP/1.1") && !strings.HasSuffix(line, " HTTP/1.0") {
			t.Fatalf("parseRequestLine(%q) accepted it", line)
		}
		target := req.target()
		if again, herr := parseRequestLine("CONNECT " + target + " HTTP/1.1"); herr != nil || again != req {
			t.Fatalf("parseRequestLine(%q) = %+v; its target %q parses as %+v, %v", line, req, target, again, herr)
		}
		host, port, err := net.SplitHostPort(target)
		if err != nil || host != req.host || port != strconv.Itoa(int(req.port)) || req.port == 0 {
			t.Fatalf("parseRequestLine(%q): target %q", line, target)
		}
		if host != strings.ToLower(host) || strings.HasSuffix(host, ".") || strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
			t.Fatalf("parseRequestLine(%q): host %q is not normalised", line, host)
		}
		a, perr := netip.ParseAddr(host)
		if req.ip.IsValid() != (perr == nil) || perr == nil && (a != req.ip || !a.Is4()) {
			t.Fatalf("parseRequestLine(%q): host %q, ip %v", line, host, req.ip)
		}
		if !req.ip.IsValid() && inetAtonReads(host) {
			t.Fatalf("parseRequestLine(%q): host %q, which inet_aton reads as an address, taken as a name", line, host)
		}
	})
}

// printableASCII says whether s holds only printable ASCII bytes.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// inetAtonReads says whether inet_aton could read host as an IPv4
// address (one to four parts, each decimal, octal or 0x hexadecimal),
// erring on the side of yes.
func inetAtonReads(host string) bool {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return false
	}
	for _, p := range parts {
		if h, ok := strings.CutPrefix(p, "0x"); ok {
			p = h
			if strings.Trim(p, "0123456789abcdef") != "" {
				return false
			}
			continue
		}
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
