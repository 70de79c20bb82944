package egress

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// refusedBody is what a request the policy refuses gets, so that an agent
// reads why and stops retrying.
const refusedBody = "refused by the sandbox policy: "

// terminated bounds: a request's header, the time to read it, an
// upstream's time to its headers.
const (
	termMaxHeaderBytes = 64 << 10
	termHeaderTimeout  = 30 * time.Second
	termUpstreamHeader = 5 * time.Minute
)

// serveTerminated serves an allowed CONNECT to a target the terminator
// terminates: TLS with the sandbox CA's certificate for the CONNECT host
// (a client hello naming another host is refused), then HTTP/1.1 requests
// one at a time, each checked against the rules, its header placeholders
// replaced, forwarded over TLS checked against the upstream CAs, and
// audited. t is the validated connection to the target, used for the
// first upstream connection; later ones dial ev.Addr again.
func (p *Proxy) serveTerminated(ctx context.Context, c net.Conn, t net.Conn, req request, pending []byte, ev *Event) {
	term := p.Terminate
	target := req.target()
	ev.Decision = DecisionAllow
	opened := *ev
	opened.Reason = "connected"
	p.audit(opened)

	var sniErr error
	tc := tls.Server(&prefixConn{Conn: c, pending: pending}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && !strings.EqualFold(strings.TrimSuffix(hello.ServerName, "."), req.host) {
				sniErr = fmt.Errorf("TLS server name %q is not the CONNECT host %s", Inert(hello.ServerName, 64), req.host)
				return nil, sniErr
			}
			return term.certFor(req.host)
		},
	})
	_ = c.SetDeadline(time.Now().Add(p.handshakeTimeout()))
	if err := tc.HandshakeContext(ctx); err != nil {
		ev.Decision = DecisionDeny
		ev.Reason = "TLS handshake with the sandbox: " + err.Error()
		if sniErr != nil {
			ev.Reason = sniErr.Error()
		}
		return
	}
	_ = c.SetDeadline(time.Time{})

	up := &upstreamDialer{first: t, addr: ev.Addr, dial: p.dial}
	transport := &http.Transport{
		DialContext:           up.dialContext,
		TLSClientConfig:       &tls.Config{ServerName: req.host, RootCAs: term.RootCAs, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		TLSHandshakeTimeout:   p.handshakeTimeout(),
		ResponseHeaderTimeout: termUpstreamHeader,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       p.idleTimeout(),
		DisableCompression:    true,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
	}
	defer transport.CloseIdleConnections()
	h := &termHandler{p: p, term: term, target: target, port: ev.Port, addr: ev.Addr, transport: transport}
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", target
			if req.port == 443 {
				pr.Out.Host = req.host
			} else {
				pr.Out.Host = target
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(p.log().Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if st, ok := r.Context().Value(statusKey{}).(*termStatus); ok {
				st.upstreamErr = err
			}
			http.Error(w, "soda: the egress proxy could not reach "+target+": "+err.Error(), http.StatusBadGateway)
		},
	}
	ln := newOneConnListener(tc)
	srv := &http.Server{
		Handler:           h,
		MaxHeaderBytes:    termMaxHeaderBytes,
		ReadHeaderTimeout: termHeaderTimeout,
		IdleTimeout:       p.idleTimeout(),
		ErrorLog:          slog.NewLogLogger(p.log().Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.done()
			}
		},
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	_ = srv.Serve(ln)
	ln.wait()
	_ = srv.Close()
	ev.BytesUp, ev.BytesDown = h.up.Load(), h.down.Load()
	ev.Reason = "TLS terminated"
}

// termHandler serves the requests of one terminated connection.
type termHandler struct {
	p         *Proxy
	term      *Terminator
	target    string
	port      uint16
	addr      string
	transport *http.Transport
	proxy     *httputil.ReverseProxy
	up, down  atomic.Int64
}

type statusKey struct{}

type termStatus struct{ upstreamErr error }

// ServeHTTP checks, rewrites, forwards and audits one request.
func (h *termHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev := Event{Time: time.Now(), Kind: KindHTTP, Port: h.port, Target: h.target, Addr: h.addr,
		Method: Inert(r.Method, 16), Path: Inert(r.URL.Path, 256), Decision: DecisionDeny}
	cw := &countingWriter{ResponseWriter: w}
	defer func() {
		ev.Status = cw.status()
		ev.BytesDown = cw.n
		h.down.Add(cw.n)
		ev.DurationMS = float64(time.Since(ev.Time)) / float64(time.Millisecond)
		h.p.audit(ev)
	}()
	refuse := func(status int, why string) {
		ev.Reason = why
		cw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		cw.Header().Set("X-Soda-Refused", "1")
		cw.Header().Set("Connection", "close")
		cw.WriteHeader(status)
		_, _ = io.WriteString(cw, refusedBody+why+"\n")
	}
	if r.ProtoMajor != 1 {
		refuse(http.StatusHTTPVersionNotSupported, "HTTP/1.1 only on a terminated connection")
		return
	}
	if !h.term.allowed(h.target, r.Method, r.URL.Path, r.URL.EscapedPath()) {
		refuse(http.StatusForbidden, fmt.Sprintf("%s %s%s is not allowed (--allow-http)", ev.Method, h.target, ev.Path))
		return
	}
	if err := h.rewriteHeaders(r); err != nil {
		refuse(http.StatusForbidden, err.Error())
		ev.Reason = "exfiltration attempt: " + err.Error()
		return
	}
	body := &countingReader{r: r.Body}
	r.Body = body
	st := &termStatus{}
	h.proxy.ServeHTTP(cw, r.WithContext(context.WithValue(r.Context(), statusKey{}, st)))
	ev.BytesUp = body.n
	h.up.Add(body.n)
	ev.Decision = DecisionAllow
	if st.upstreamErr != nil {
		ev.Decision = DecisionDeny
		ev.Reason = "upstream: " + st.upstreamErr.Error()
	}
}

// rewriteHeaders replaces the target's placeholders in r's headers (and
// in the credentials of Basic authorization) with their secrets; a
// placeholder of another target's secret, in a header or the URL, is an
// error.
func (h *termHandler) rewriteHeaders(r *http.Request) error {
	if _, err := h.term.replace(h.target, r.URL.String()); err != nil {
		return err
	}
	for k, vs := range r.Header {
		for i, v := range vs {
			if strings.EqualFold(k, "Authorization") {
				if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
					if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
						nv, err := h.term.replace(h.target, string(dec))
						if err != nil {
							return err
						}
						v = scheme + " " + base64.StdEncoding.EncodeToString([]byte(nv))
					}
				}
			}
			nv, err := h.term.replace(h.target, v)
			if err != nil {
				return err
			}
			vs[i] = nv
		}
	}
	return nil
}

// upstreamDialer hands the transport the validated connection first, and
// dials the validated address again for later ones.
type upstreamDialer struct {
	mu    sync.Mutex
	first net.Conn
	addr  string
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (u *upstreamDialer) dialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	u.mu.Lock()
	c := u.first
	u.first = nil
	u.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return u.dial(ctx, "tcp", u.addr)
}

// prefixConn reads pending before the connection's own bytes.
type prefixConn struct {
	net.Conn
	pending []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// oneConnListener accepts one connection, then waits until it is done.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
	mu     sync.Mutex
	taken  bool
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: c, closed: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) done()          { l.once.Do(func() { close(l.closed) }) }
func (l *oneConnListener) wait()          { <-l.closed }
func (l *oneConnListener) Close() error   { l.done(); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// countingReader counts what is read through it.
type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// countingWriter counts the body written and keeps the status.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countingWriter) status() int {
	if c.code == 0 {
		return http.StatusOK
	}
	return c.code
}
