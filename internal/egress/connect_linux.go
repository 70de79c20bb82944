package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// httpError is a refusal of a CONNECT request: the status to answer with
// and the reason to audit.
type httpError struct {
	status int
	reason string
}

func (e *httpError) Error() string { return e.reason }

// statusText returns the reason phrase for the statuses the proxy sends.
func statusText(code int) string {
	switch code {
	case 200:
		return "Connection Established"
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 405:
		return "Method Not Allowed"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}

// errorReply is the whole response to a refused request.
func errorReply(code int) string {
	return "HTTP/1.1 " + strconv.Itoa(code) + " " + statusText(code) +
		"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
}

// establishedReply is the response to an accepted CONNECT.
const establishedReply = "HTTP/1.1 200 Connection Established\r\n\r\n"

// readRequest reads a request header, every line ending in CRLF, up to and
// including the empty line, and returns its first line without the CRLF.
// The header may be at most limit bytes; br must buffer at least limit
// bytes (bufio.NewReaderSize(c, limit)). Bytes after the header stay
// buffered in br. A header that is too long or malformed gives an
// *httpError; a read error (end of file, deadline) is returned wrapped.
func readRequest(br *bufio.Reader, limit int) (string, error) {
	var first string
	total := 0
	for n := 0; ; n++ {
		b, err := br.ReadSlice('\n')
		total += len(b)
		if total > limit || errors.Is(err, bufio.ErrBufferFull) {
			return "", &httpError{400, fmt.Sprintf("request header longer than %d bytes", limit)}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && total == 0 {
				return "", fmt.Errorf("read request: %w", err)
			}
			return "", fmt.Errorf("read request after %d bytes: %w", total, err)
		}
		if len(b) < 2 || b[len(b)-2] != '\r' {
			return "", &httpError{400, "request line not terminated by CRLF"}
		}
		if n == 0 {
			first = string(b[:len(b)-2])
		} else if len(b) == 2 {
			return first, nil
		}
	}
}

// request is a parsed CONNECT request.
type request struct {
	host string     // normalised, see normalizeHost
	ip   netip.Addr // valid when host is an IPv4 literal
	port uint16
}

// target returns "host:port".
func (r request) target() string { return r.host + ":" + strconv.Itoa(int(r.port)) }

// parseRequestLine parses "CONNECT host:port HTTP/1.x".
func parseRequestLine(line string) (request, *httpError) {
	parts := strings.Split(line, " ")
	if len(parts) != 3 {
		return request{}, &httpError{400, "malformed request line"}
	}
	method, target, version := parts[0], parts[1], parts[2]
	if method != "CONNECT" {
		return request{}, &httpError{405, fmt.Sprintf("method %s not allowed, only CONNECT", Inert(method, 32))}
	}
	if version != "HTTP/1.1" && version != "HTTP/1.0" {
		return request{}, &httpError{400, fmt.Sprintf("unsupported protocol version %s", Inert(version, 32))}
	}
	r, err := parseTarget(target)
	if err != nil {
		return request{}, &httpError{400, "bad target: " + Inert(err.Error(), 128)}
	}
	return r, nil
}

// parseTarget parses and normalises a CONNECT target "host:port".
func parseTarget(s string) (request, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return request{}, errors.New("missing port")
	}
	hostPart, portPart := s[:i], s[i+1:]
	if strings.ContainsAny(hostPart, "[]") {
		return request{}, errors.New("IPv6 literals are not supported")
	}
	port, err := parsePort(portPart)
	if err != nil {
		return request{}, err
	}
	host, ip, err := normalizeHost(hostPart)
	if err != nil {
		return request{}, err
	}
	return request{host: host, ip: ip, port: port}, nil
}
