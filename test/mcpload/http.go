package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// newHTTPClient returns a client tuned for many concurrent sessions against
// one loopback host: enough idle keep-alive connections for every session
// (plus its GET stream), no proxy, no compression, HTTP/1.1.
func newHTTPClient(sessions int) *http.Client {
	idle := 2*sessions + 16
	tr := &http.Transport{
		Proxy: nil, // loopback only: never go through a proxy
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     16 << 10,
		ReadBufferSize:      16 << 10,
	}
	return &http.Client{Transport: tr}
}

// checkLoopback refuses URLs whose host is not a loopback address: this tool
// generates load and must only ever target this machine.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q: scheme must be http or https", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("url %q: host must be a loopback address (127.0.0.0/8, ::1, localhost)", raw)
	}
	return nil
}

// httpSession is one Streamable HTTP client session.
type httpSession struct {
	cfg    *config
	client *http.Client
	bodies *requestBodies
	sid    string
	proto  string
	nextID int
	br     *bufio.Reader

	getCancel context.CancelFunc
	getDone   chan struct{}
}

func newHTTPSession(cfg *config, client *http.Client) *httpSession {
	return &httpSession{cfg: cfg, client: client, br: bufio.NewReaderSize(nil, 16<<10)}
}

// newRequest builds a request carrying the session's headers.
func (s *httpSession) newRequest(ctx context.Context, method string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.cfg.url, rd)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", method, err)
	}
	h := req.Header
	if body != nil {
		h["Content-Type"] = []string{"application/json"}
	}
	if method == http.MethodGet {
		h["Accept"] = []string{"text/event-stream"}
	} else {
		h["Accept"] = []string{"application/json, text/event-stream"}
	}
	if s.cfg.token != "" {
		h["Authorization"] = []string{"Bearer " + s.cfg.token}
	}
	if s.sid != "" {
		h["Mcp-Session-Id"] = []string{s.sid}
	}
	if s.proto != "" {
		h["Mcp-Protocol-Version"] = []string{s.proto}
	}
	return req, nil
}

// roundTrip POSTs a request with JSON-RPC id and returns the matching
// response, read from a JSON body or an SSE stream.
func (s *httpSession) roundTrip(ctx context.Context, body []byte, id int) (*rpcMessage, http.Header, error) {
	req, err := s.newRequest(ctx, http.MethodPost, body)
	if err != nil {
		return nil, nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, resp.Header, fmt.Errorf("POST: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json"):
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, resp.Header, fmt.Errorf("read JSON body: %w", err)
		}
		m, err := matchResponse(data, id)
		if err != nil {
			return nil, resp.Header, err
		}
		if m == nil {
			return nil, resp.Header, fmt.Errorf("JSON body holds no response with id %d: %s", id, truncate(string(data), 200))
		}
		return m, resp.Header, nil
	case strings.HasPrefix(ct, "text/event-stream"):
		s.br.Reset(resp.Body)
		m, err := findSSEResponse(s.br, id)
		if err != nil {
			return nil, resp.Header, err
		}
		// The server should end the stream right after the response; drain
		// it so the connection can be reused, but don't wait long for it.
		t := time.AfterFunc(time.Second, func() { resp.Body.Close() })
		_, _ = io.Copy(io.Discard, s.br)
		t.Stop()
		s.br.Reset(nil)
		return m, resp.Header, nil
	default:
		return nil, resp.Header, fmt.Errorf("unexpected Content-Type %q", ct)
	}
}

// findSSEResponse reads SSE events from r until one carries the JSON-RPC
// response with the given id.
func findSSEResponse(r *bufio.Reader, id int) (*rpcMessage, error) {
	var data []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A very long line: collect it whole.
			rest, err2 := r.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		if len(line) > 0 {
			l := bytes.TrimRight(line, "\r\n")
			switch {
			case len(l) == 0:
				if len(data) > 0 {
					m, merr := matchResponse(data, id)
					if merr != nil {
						return nil, fmt.Errorf("SSE event: %w", merr)
					}
					if m != nil {
						return m, nil
					}
					data = data[:0]
				}
			case bytes.HasPrefix(l, []byte("data:")):
				v := l[len("data:"):]
				if len(v) > 0 && v[0] == ' ' {
					v = v[1:]
				}
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, v...)
			}
			// comments (":"), event:, id:, retry: are ignored
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(data) > 0 {
					if m, _ := matchResponse(data, id); m != nil {
						return m, nil
					}
				}
				return nil, fmt.Errorf("SSE stream ended without a response to id %d", id)
			}
			return nil, fmt.Errorf("read SSE stream: %w", err)
		}
	}
}

func (s *httpSession) initialize(ctx context.Context) error {
	if s.bodies == nil {
		b, err := newRequestBodies(s.cfg)
		if err != nil {
			return err
		}
		s.bodies = b
	}
	s.sid, s.proto = "", ""
	s.nextID++
	m, hdr, err := s.roundTrip(ctx, s.bodies.initialize(s.nextID), s.nextID)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	proto, err := checkInit(m, s.cfg.protoCheck)
	if err != nil {
		return err
	}
	s.sid = hdr.Get("Mcp-Session-Id")
	s.proto = proto

	req, err := s.newRequest(ctx, http.MethodPost, s.bodies.initNotif)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("notifications/initialized: HTTP %d, want 202", resp.StatusCode)
	}
	if s.cfg.getStream {
		s.openGetStream()
	}
	return nil
}

// openGetStream opens the standalone GET SSE stream and drains it in the
// background until close; a 405 (server offers none) is fine.
func (s *httpSession) openGetStream() {
	ctx, cancel := context.WithCancel(context.Background())
	s.getCancel = cancel
	s.getDone = make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(s.getDone)
		var once sync.Once
		signal := func() { once.Do(func() { close(ready) }) }
		defer signal()
		req, err := s.newRequest(ctx, http.MethodGet, nil)
		if err != nil {
			return
		}
		resp, err := s.client.Do(req)
		signal()
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Second):
	}
}

func (s *httpSession) call(ctx context.Context) error {
	s.nextID++
	m, _, err := s.roundTrip(ctx, s.bodies.call(s.nextID), s.nextID)
	if err != nil {
		return fmt.Errorf("tools/call: %w", err)
	}
	return checkCall(m, s.cfg.expect)
}

func (s *httpSession) close() error {
	if s.getCancel != nil {
		s.getCancel()
		<-s.getDone
	}
	if s.sid == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	req, err := s.newRequest(ctx, http.MethodDelete, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("DELETE session: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted, http.StatusNoContent, http.StatusMethodNotAllowed:
		return nil
	default:
		return fmt.Errorf("DELETE session: HTTP %d", resp.StatusCode)
	}
}
