package llmgateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Route is one provider the gateway serves, with the upstream it forwards
// to and the real key it adds.
type Route struct {
	Provider Provider
	// Upstream is where requests go (nil: the provider's own API).
	Upstream *url.URL
	// Key is the real credential. It is never logged, never put in an
	// Event, and never sent anywhere but Upstream.
	Key string
}

// Config is a gateway's configuration.
type Config struct {
	Routes []Route
	// RootCAs are the certificate authorities upstreams are checked
	// against (nil: the host's).
	RootCAs *x509.CertPool
	// Budget, if positive, is the number of tokens (Usage.Total) after
	// which requests are refused.
	Budget int64
	// Record, if set, receives an Event for every request, forwarded or
	// refused. It must not block.
	Record func(Event)
	// Metrics, if set, counts requests, tokens and upstream errors.
	Metrics Metrics
	Log     *slog.Logger
	// Limits; zero means the default.
	MaxRequestBytes  int64         // a request's body (default 32 MiB)
	MaxResponseBytes int64         // a response's body (default 256 MiB)
	MaxConcurrent    int           // requests in flight (default 32)
	HeaderTimeout    time.Duration // upstream's time to its headers (default 10 min)
}

// Metrics is what the gateway counts; internal/metrics implements it.
type Metrics interface {
	Request(provider string, status int)
	Tokens(provider, kind string, n int64)
	UpstreamError(provider string)
}

// Event is the record of one request: never a header, a body or a query.
type Event struct {
	Time       time.Time `json:"time"`
	Provider   string    `json:"provider"`
	Method     string    `json:"method"`
	Path       string    `json:"path"`
	Status     int       `json:"status"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
	Usage      Usage     `json:"usage"`
	// Refused says why the gateway answered itself instead of
	// forwarding (a wrong key, the budget, a bound); UpstreamError what
	// went wrong reaching the upstream.
	Refused       string `json:"refused,omitempty"`
	UpstreamError string `json:"upstream_error,omitempty"`
}

// Gateway is a running model gateway.
type Gateway struct {
	cfg         Config
	routes      map[string]*route
	placeholder map[string]string // by provider
	sem         chan struct{}
	log         *slog.Logger

	mu    sync.Mutex
	usage Usage // of the whole run
	spent atomic.Int64

	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

type route struct {
	Route
	proxy *httputil.ReverseProxy
}

// Placeholder returns a new random placeholder key for p: 128 bits, in a
// shape p's clients accept.
func Placeholder(p Provider) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return p.placeholderPrefix + hex.EncodeToString(b)
}

// New returns a gateway for cfg, each route with a new placeholder; Start
// serves it.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Routes) == 0 {
		return nil, errors.New("model gateway: no provider")
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 32 << 20
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 256 << 20
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 32
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, routes: map[string]*route{}, placeholder: map[string]string{},
		sem: make(chan struct{}, cfg.MaxConcurrent), log: cfg.Log, done: make(chan struct{})}
	transport := &http.Transport{
		Proxy:                 nil, // never the host's proxy variables: the upstream is the one named
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
	}
	buffers := &bufferPool{}
	for _, r := range cfg.Routes {
		if r.Key == "" {
			return nil, fmt.Errorf("model gateway: %s: no key", r.Provider.Name)
		}
		if _, dup := g.routes[r.Provider.Name]; dup {
			return nil, fmt.Errorf("model gateway: %s given twice", r.Provider.Name)
		}
		if r.Upstream == nil {
			u, err := ParseUpstream(r.Provider.Upstream)
			if err != nil {
				return nil, err
			}
			r.Upstream = u
		}
		rt := &route{Route: r}
		rt.proxy = &httputil.ReverseProxy{
			Rewrite:       rt.rewrite,
			Transport:     transport,
			FlushInterval: -1, // event streams pass through as they come
			BufferPool:    buffers,
			ErrorLog:      slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
			// Set once: what a request needs of them is in its
			// context (exchange).
			ModifyResponse: modifyResponse,
			ErrorHandler:   rt.upstreamError,
		}
		g.routes[r.Provider.Name] = rt
		g.placeholder[r.Provider.Name] = Placeholder(r.Provider)
	}
	return g, nil
}

// PlaceholderFor returns the placeholder of provider's route.
func (g *Gateway) PlaceholderFor(provider string) string { return g.placeholder[provider] }

// Env returns, for a sandbox that reaches the gateway at addr (host:port
// on its loopback), the variables that point its clients at the gateway:
// each provider's base URL and placeholder key (in KeyEnv, then in
// MoreKeyEnv).
func (g *Gateway) Env(addr string) []string {
	var env []string
	for _, r := range g.cfg.Routes {
		p := r.Provider
		env = append(env, p.BaseURLEnv+"=http://"+addr+"/"+p.Name+p.BaseURLSuffix, p.KeyEnv+"="+g.placeholder[p.Name])
		for _, k := range p.MoreKeyEnv {
			env = append(env, k+"="+g.placeholder[p.Name])
		}
	}
	return env
}

// Start serves the gateway on ln until Close.
func (g *Gateway) Start(ln net.Listener) {
	g.ln = ln
	g.srv = &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(g.done)
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Warn("model gateway stopped", "err", err)
		}
	}()
}

// Close stops the gateway: requests in flight are cut.
func (g *Gateway) Close() error {
	if g.srv == nil {
		return nil
	}
	err := g.srv.Close()
	<-g.done
	return err
}

// Usage returns the tokens spent through the gateway so far.
func (g *Gateway) Usage() Usage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.usage
}

// ServeHTTP checks a request and forwards it to its provider.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	name, rest, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	ev := Event{Time: start, Provider: name, Method: req.Method, Path: "/" + rest}
	rt, ok := g.routes[name]
	if !ok {
		ev.Provider = ""
		ev.Path = req.URL.Path
		g.refuse(w, &ev, nil, http.StatusNotFound, "not_found_error", fmt.Sprintf("soda: no model gateway at %s (this sandbox's: %s)", pathElem(req.URL.Path), strings.Join(g.names(), ", ")))
		return
	}
	if !g.keyOK(rt, req) {
		g.refuse(w, &ev, rt, http.StatusUnauthorized, "authentication_error", "soda: the request does not carry this sandbox's placeholder key; the model gateway forwards no other key")
		return
	}
	if req.Header.Get("Upgrade") != "" {
		// A WebSocket (Codex asks for the Responses API over one first)
		// would carry usage the gateway does not read, past the budget;
		// 426 sends the client to plain HTTP at once, where a 502 would
		// have it retry first.
		g.refuse(w, &ev, rt, http.StatusUpgradeRequired, "invalid_request_error", "soda: the model gateway does not relay WebSockets (it could not meter them); use HTTP")
		return
	}
	if b := g.cfg.Budget; b > 0 && g.spent.Load() >= b {
		g.refuse(w, &ev, rt, http.StatusForbidden, "permission_error", fmt.Sprintf("soda: this sandbox's model budget of %d tokens is spent (sodactl run --llm-budget); the request was not sent", b))
		return
	}
	if req.ContentLength > g.cfg.MaxRequestBytes {
		g.refuse(w, &ev, rt, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("soda: request body over the model gateway's %d bytes", g.cfg.MaxRequestBytes))
		return
	}
	select {
	case g.sem <- struct{}{}:
		defer func() { <-g.sem }()
	default:
		g.refuse(w, &ev, rt, http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf("soda: over %d model requests in flight from this sandbox", g.cfg.MaxConcurrent))
		return
	}
	up := &countReader{r: http.MaxBytesReader(w, req.Body, g.cfg.MaxRequestBytes)}
	req.Body = up
	cw := &countWriter{ResponseWriter: w}
	x := &exchange{maxResponse: g.cfg.MaxResponseBytes, maxRequest: g.cfg.MaxRequestBytes}
	rt.proxy.ServeHTTP(cw, req.WithContext(context.WithValue(req.Context(), exchangeKey{}, x)))

	ev.Status = cw.status()
	ev.BytesUp, ev.BytesDown = up.n, cw.n
	ev.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	if x.upstreamErr != nil {
		ev.UpstreamError = errText(x.upstreamErr)
		if g.cfg.Metrics != nil {
			g.cfg.Metrics.UpstreamError(name)
		}
	}
	if x.meter != nil {
		ev.Usage = x.meter.Usage()
		g.account(name, ev.Usage)
	}
	g.record(&ev)
}

// exchangeKey carries a request's exchange to the proxy's handlers.
type exchangeKey struct{}

// exchange is what one forwarded request's handlers share with ServeHTTP:
// the bounds, the response's meter, the upstream's error.
type exchange struct {
	maxResponse, maxRequest int64
	meter                   *meter
	upstreamErr             error
}

// modifyResponse bounds a response's body and tees it to a meter.
func modifyResponse(resp *http.Response) error {
	x, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if x == nil {
		return nil
	}
	x.meter = newMeter(resp.Header.Get("Content-Type"))
	resp.Body = &boundedBody{rc: resp.Body, left: x.maxResponse, meter: x.meter}
	return nil
}

// upstreamError answers a request that could not be forwarded, in the
// provider's error shape, and keeps the error for its record.
func (rt *route) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if x != nil {
		x.upstreamErr = err
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) && x != nil {
		writeError(w, rt.Provider, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("soda: request body over the model gateway's %d bytes", x.maxRequest))
		return
	}
	writeError(w, rt.Provider, http.StatusBadGateway, "api_error", "soda: the model gateway could not reach "+rt.Upstream.Host+": "+errText(err))
}

// rewrite makes the upstream request: the provider's URL, the key
// replaced, nothing of the client's that could reach elsewhere.
func (rt *route) rewrite(pr *httputil.ProxyRequest) {
	_, rest, _ := strings.Cut(strings.TrimPrefix(pr.In.URL.Path, "/"), "/")
	u := *rt.Upstream
	u.Path = rt.Upstream.Path + "/" + rest
	u.RawPath = ""
	u.RawQuery = pr.In.URL.RawQuery
	pr.Out.URL = &u
	pr.Out.Host = ""
	h := pr.Out.Header
	for _, k := range []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		h.Del(k)
	}
	// The gateway reads the usage: the transport asks for (and undoes)
	// compression itself.
	h.Del("Accept-Encoding")
	if rt.Provider.Bearer {
		h.Set("Authorization", "Bearer "+rt.Key)
	} else {
		h.Set("X-Api-Key", rt.Key)
	}
}

// keyOK says whether req carries the placeholder of rt's provider, as its
// clients send a key: Anthropic's x-api-key, or a bearer token.
func (g *Gateway) keyOK(rt *route, req *http.Request) bool {
	want := []byte(g.placeholder[rt.Provider.Name])
	got := req.Header.Get("X-Api-Key")
	if got == "" || rt.Provider.Bearer {
		a := req.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(a, "Bearer ")
		if !ok {
			return false
		}
		got = tok
	}
	return subtle.ConstantTimeCompare([]byte(got), want) == 1
}

// account adds u to the run's usage.
func (g *Gateway) account(provider string, u Usage) {
	g.mu.Lock()
	g.usage = g.usage.Add(u)
	g.spent.Store(g.usage.Total())
	g.mu.Unlock()
	if g.cfg.Metrics != nil {
		for i, n := range u.byKind() {
			if n > 0 {
				g.cfg.Metrics.Tokens(provider, kinds[i], n)
			}
		}
	}
}

// refuse answers req itself, in rt's provider's error shape.
func (g *Gateway) refuse(w http.ResponseWriter, ev *Event, rt *route, status int, kind, msg string) {
	p := Provider{}
	if rt != nil {
		p = rt.Provider
	}
	writeError(w, p, status, kind, msg)
	ev.Status, ev.Refused = status, msg
	ev.DurationMS = float64(time.Since(ev.Time).Microseconds()) / 1000
	g.record(ev)
}

func (g *Gateway) record(ev *Event) {
	if g.cfg.Metrics != nil {
		g.cfg.Metrics.Request(ev.Provider, ev.Status)
	}
	if g.cfg.Record != nil {
		g.cfg.Record(*ev)
	}
	g.log.Debug("model request", "provider", ev.Provider, "method", ev.Method, "path", ev.Path, "status", ev.Status,
		"bytes_up", ev.BytesUp, "bytes_down", ev.BytesDown, "duration_ms", ev.DurationMS,
		"input_tokens", ev.Usage.Input, "output_tokens", ev.Usage.Output, "refused", ev.Refused, "upstream_error", ev.UpstreamError)
}

func (g *Gateway) names() []string {
	var n []string
	for _, r := range g.cfg.Routes {
		n = append(n, "/"+r.Provider.Name)
	}
	return n
}

// writeError writes an error the provider's clients read: Anthropic's
// {"type":"error","error":{...}} or OpenAI's {"error":{...}}.
func writeError(w http.ResponseWriter, p Provider, status int, kind, msg string) {
	var body any
	if p.Bearer {
		body = map[string]any{"error": map[string]any{"message": msg, "type": kind, "code": kind}}
	} else {
		body = map[string]any{"type": "error", "error": map[string]any{"type": kind, "message": msg}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Soda-Refused", "1")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// pathElem is the first element of a path, bounded for a message.
func pathElem(p string) string {
	e, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if len(e) > 40 {
		e = e[:40] + "…"
	}
	return "/" + e
}

// errText is err's message without anything the client sent.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// countReader counts what is read through it.
type countReader struct {
	r io.ReadCloser
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countReader) Close() error { return c.r.Close() }

// countWriter counts the body written through it and keeps the status.
type countWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// Flush passes flushes on: event streams are flushed as they come.
func (c *countWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (c *countWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countWriter) status() int {
	if c.code == 0 {
		return http.StatusOK
	}
	return c.code
}

// bufferPool lends the proxies their copy buffers, of the size
// ReverseProxy would otherwise allocate for every request (32 KiB): that
// allocation was half the bytes a small request through the gateway
// allocated (make bench-llm).
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferSize {
		buf = buf[:copyBufferSize]
		b.p.Put(&buf)
	}
}

// errResponseTooLarge ends a response over the gateway's bound.
var errResponseTooLarge = errors.New("response body over the model gateway's bound")

// boundedBody is an upstream body cut at a bound and teed to a meter.
type boundedBody struct {
	rc    io.ReadCloser
	left  int64
	meter *meter
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.meter != nil && n > 0 {
		_, _ = b.meter.Write(p[:n])
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
