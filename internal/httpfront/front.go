// Package httpfront is soda's hardened loopback HTTP listener: bearer-token
// authentication, Host and Origin checks against DNS rebinding, bounded
// connections, headers, read time and bodies, and a readiness endpoint.
//
// A client without the token cannot keep those with it out: every refused
// request (any 4xx) closes its connection, a connection that sends no
// complete request headers within ReadTimeout is closed, and connections
// that have not authenticated yet do not count against MaxConnections but
// have a pool of their own, whose oldest member makes room for a newcomer
// (see gate).
package httpfront

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soda-project/soda/internal/logevent"
)

// Options configures a Front.
type Options struct {
	// Name is the server's instance name, used in the WWW-Authenticate realm.
	Name string
	// Token is the bearer token clients must present; empty disables
	// authentication (Auth=none).
	Token string
	// TokenCommand is the command that prints Token, named in the body
	// of a 401 (default "sodactl mcp token NAME").
	TokenCommand string
	// MaxConnections bounds simultaneous authenticated client connections,
	// across all listeners; 0 means no bound. Up to pendingPerSlot times as
	// many connections may be open that have not authenticated yet; at that
	// bound, the oldest of them is closed for a new one.
	MaxConnections int
	// MaxHeaderBytes bounds the request line and headers of a request,
	// counted from its first byte to the end of the empty line that ends
	// them; larger requests get 431. 0 means net/http's default (1 MiB,
	// plus its slack).
	MaxHeaderBytes int
	// ReadTimeout bounds the time to receive headers and body; a
	// connection that sends no complete request headers within it is closed.
	ReadTimeout time.Duration
	// RefuseOrigin refuses every request with an Origin header, loopback
	// ones included (a validation worker has no browser clients).
	RefuseOrigin bool
	// ExactHost accepts only a Host that is a served listener's address
	// as it is (127.0.0.1:PORT), not "localhost:PORT" or another loopback
	// address.
	ExactHost bool
	// Metrics counts refusals and limit hits (nil: off).
	Metrics Metrics
	// MetricsHandler, when set, serves GET /metrics to the clients that
	// pass the checks above (the same token as the server's).
	MetricsHandler http.Handler
}

// headerSlack is what net/http adds to Server.MaxHeaderBytes for its read
// buffer; its limit on a request's line and headers is the sum. Ours is
// enforced by headerScan; net/http's is set to match it where it can, so
// that larger headers are not even buffered.
const headerSlack = 4096

// Front wraps an http.Handler with soda's access checks and bounds.
type Front struct {
	opts     Options
	log      *slog.Logger
	next     http.Handler
	draining atomic.Bool
	// portsMu guards ports, the ports accepted in Host headers: those of
	// the listeners served. mcpd calls Serve for each listener
	// concurrently, so adding one must not lose another.
	portsMu sync.RWMutex
	ports   []string
	addrs   []string // the listeners' addresses, for ExactHost
	gate    *gate
	srv     *http.Server
}

// Metrics is what a Front counts; internal/metrics's HTTP implements it.
type Metrics interface {
	Refused(reason string)
	LimitHit(limit string)
}

// noMetrics is Metrics off.
type noMetrics struct{}

func (noMetrics) Refused(string)  {}
func (noMetrics) LimitHit(string) {}

// New returns a Front serving next.
func New(log *slog.Logger, opts Options, next http.Handler) *Front {
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	f := &Front{opts: opts, log: log, next: next}
	f.gate = newGate(log, opts.MaxConnections, opts.MaxHeaderBytes)
	f.gate.m = opts.Metrics
	maxHeader := 0
	if opts.MaxHeaderBytes > 0 {
		maxHeader = max(opts.MaxHeaderBytes-headerSlack, 1)
	}
	f.srv = &http.Server{
		Handler:           f,
		MaxHeaderBytes:    maxHeader,
		ReadHeaderTimeout: opts.ReadTimeout,
		ReadTimeout:       opts.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       connContext,
		ConnState:         connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return f
}

// tokenCommand is what prints the token, for a client refused without it.
func (f *Front) tokenCommand() string {
	if f.opts.TokenCommand != "" {
		return f.opts.TokenCommand
	}
	return "sodactl mcp token " + f.opts.Name
}

// SetDraining makes /ready answer 503.
func (f *Front) SetDraining(v bool) { f.draining.Store(v) }

// Serve serves on l (which must be loopback) until Shutdown.
func (f *Front) Serve(l net.Listener) error {
	if err := checkLoopbackListener(l); err != nil {
		return err
	}
	if tcp, ok := l.Addr().(*net.TCPAddr); ok {
		f.portsMu.Lock()
		f.ports = append(f.ports, strconv.Itoa(tcp.Port))
		f.addrs = append(f.addrs, tcp.String())
		f.portsMu.Unlock()
	}
	l = f.gate.listener(l)
	err := f.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for handlers until ctx is done.
func (f *Front) Shutdown(ctx context.Context) error {
	return f.srv.Shutdown(ctx)
}

// Close closes every connection at once.
func (f *Front) Close() error { return f.srv.Close() }

func checkLoopbackListener(l net.Listener) error {
	switch a := l.Addr().(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !ip.Unmap().IsLoopback() {
			return fmt.Errorf("refusing to serve on %s: soda listens on loopback addresses only", a)
		}
	case *net.UnixAddr:
	default:
		return fmt.Errorf("refusing to serve on %s: unsupported address type", a)
	}
	return nil
}

// ServeHTTP applies the checks in order: header size, Host, Origin, token;
// then marks the connection authenticated and serves /ready or hands over to
// the wrapped handler. Every 4xx answer, the wrapped handler's included,
// closes the connection.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A Unix socket cannot be reached by a browser, so DNS rebinding does
	// not apply there and Host may be anything (curl sends "localhost").
	gc, _ := r.Context().Value(connKey{}).(*gatedConn)
	if gc != nil && gc.headers.tooLarge() {
		f.log.Warn("limit hit", logevent.LimitHit, "limit", "headers", "max_bytes", f.opts.MaxHeaderBytes, "remote", r.RemoteAddr)
		deny(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request line and headers exceed %d bytes", f.opts.MaxHeaderBytes))
		return
	}
	_, viaUnix := r.Context().Value(http.LocalAddrContextKey).(*net.UnixAddr)
	if !viaUnix && !f.hostAllowed(r.Host) {
		f.opts.Metrics.Refused("host")
		f.log.Warn("request refused", "reason", "host", "host", r.Host, "remote", r.RemoteAddr)
		deny(w, http.StatusForbidden, fmt.Sprintf("Host %q does not name this loopback listener (DNS rebinding protection)", r.Host))
		return
	}
	if o := r.Header.Get("Origin"); o != "" && (f.opts.RefuseOrigin || !originAllowed(o)) {
		f.opts.Metrics.Refused("origin")
		f.log.Warn("request refused", "reason", "origin", "origin", o, "remote", r.RemoteAddr)
		deny(w, http.StatusForbidden, fmt.Sprintf("Origin %q is not a loopback origin (DNS rebinding protection)", o))
		return
	}
	if f.opts.Token != "" && !f.authorized(r) {
		f.opts.Metrics.Refused("auth")
		f.log.Warn("auth failure", logevent.AuthFailure, "remote", r.RemoteAddr, "path", r.URL.Path, "had_credentials", r.Header.Get("Authorization") != "")
		realm := fmt.Sprintf(`Bearer realm="soda-mcp/%s"`, f.opts.Name)
		if r.Header.Get("Authorization") != "" {
			realm += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", realm)
		deny(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token> ("+f.tokenCommand()+")")
		return
	}
	if gc != nil {
		ok, waited := gc.authenticated(r.Context())
		if !ok {
			gc.Close() // the client left, or the server is closing: answer nothing
			return
		}
		if waited && f.opts.ReadTimeout > 0 {
			// The wait for a slot must not eat the time to send the body.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(f.opts.ReadTimeout))
		}
	}
	if r.URL.Path == "/ready" {
		f.serveReady(w, r)
		return
	}
	if r.URL.Path == "/metrics" && f.opts.MetricsHandler != nil {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			deny(w, http.StatusMethodNotAllowed, "GET /metrics")
			return
		}
		f.opts.MetricsHandler.ServeHTTP(w, r)
		return
	}
	f.next.ServeHTTP(&closeOn4xx{ResponseWriter: w}, r)
}

// closeOn4xx adds Connection: close to a 4xx answer, so that net/http closes
// the connection after it.
type closeOn4xx struct {
	http.ResponseWriter
	wrote bool
}

func (w *closeOn4xx) WriteHeader(code int) {
	if !w.wrote && code >= 400 && code < 500 {
		w.Header().Set("Connection", "close")
	}
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeOn4xx) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *closeOn4xx) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush supports handlers that assert http.Flusher.
func (w *closeOn4xx) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (f *Front) serveReady(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		deny(w, http.StatusMethodNotAllowed, "use GET")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if f.draining.Load() {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "draining")
		return
	}
	fmt.Fprintln(w, "ready")
}

func (f *Front) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	return subtle.ConstantTimeCompare([]byte(tok), []byte(f.opts.Token)) == 1
}

// hostAllowed accepts Host values that name a loopback address with the
// port of a listener being served.
func (f *Front) hostAllowed(host string) bool {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return false
	}
	if !isLoopbackHost(h) {
		return false
	}
	f.portsMu.RLock()
	defer f.portsMu.RUnlock()
	if f.opts.ExactHost {
		return slices.Contains(f.addrs, host)
	}
	// Unix-socket listeners have no port; accept "localhost" with any port.
	return len(f.ports) == 0 || slices.Contains(f.ports, port)
}

func isLoopbackHost(h string) bool {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}

func originAllowed(o string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopbackHost(u.Hostname())
}

// deny answers a refusal and closes the connection after it: a client that
// was refused keeps no connection, hence no slot.
func deny(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":%q}}`+"\n", msg)
}
