package validated

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/httpfront"
	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/stdiorpc"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/token"
	"github.com/soda-project/soda/internal/validate"
)

// The listener's bounds (the seed's figures).
const (
	maxConnections = 32
	maxHeaderBytes = 16 << 10
	readTimeout    = 10 * time.Second
	maxBodyBytes   = 2 << 20
	maxBodyReaders = 16
	maxSessions    = 8
	// DefaultSessionIdle is how long a session may stay unused (no
	// request; a call in progress counts as use) before it is closed.
	DefaultSessionIdle = 15 * time.Minute
)

// sessionSlots caps the MCP sessions: a slot is reserved before the SDK
// sees an initialize request, and held while the session initializes,
// lives and closes (until its last handler has returned), so that
// concurrent initialize requests cannot all pass a count of the live ones.
type sessionSlots struct {
	mu  sync.Mutex
	max int
	n   int
}

// reserve takes a slot; false when all are taken.
func (s *sessionSlots) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.max {
		return false
	}
	s.n++
	return true
}

func (s *sessionSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
}

// serveInitialize serves an initialize request on a reserved slot: the
// slot passes to the session it made, until that session is over, or is
// released at once when none was made.
func (s *sessionSlots) serveInitialize(rw http.ResponseWriter, r *http.Request, h http.Handler, server *mcp.Server) {
	held := true
	defer func() {
		if held {
			s.release()
		}
	}()
	h.ServeHTTP(rw, r)
	sid := rw.Header().Get("Mcp-Session-Id")
	if sid == "" {
		return
	}
	for ss := range server.Sessions() {
		if ss.ID() == sid {
			held = false
			go func() {
				_ = ss.Wait() // closed and idle: no handler of it runs
				s.release()
			}()
			return
		}
	}
}

// serveHTTP serves server over Streamable HTTP on the systemd socket
// (socket activation) or on o.listen, behind the token of o.tokenFile
// (made on the first start), until ctx ends or a listener fails. The TCP
// addresses served and the token file go into owner's record, for
// "sodactl validate client-config"; systemd is told ready once the
// listeners serve (recovery is done by then). /ready is 503 while the
// worker is poisoned and while draining.
//
// Its phases: the token, the listeners, the /mcp handler and the front
// before it, the owner's record, serving, and the drain.
func serveHTTP(ctx context.Context, log *slog.Logger, notify *systemd.Notifier, server *mcp.Server, calls *validate.Calls, w *validate.Worker, owner *validate.Owner, o opts, reg *metrics.Registry) error {
	tok, err := token.Ensure(o.tokenFile)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	ls, err := httpListeners(o.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", newMCPFront(log, server, calls, o.sessionIdle))
	kind := w.Kind().Name
	var fm httpfront.Metrics // off: nil, not a nil *metrics.HTTP
	if reg != nil {
		fm = metrics.NewHTTP(reg, "validate-"+kind)
	}
	front := httpfront.New(log, httpfront.Options{Name: "validate-" + kind, Token: tok, TokenCommand: tokenCommand(kind, o.stateDir), MaxConnections: maxConnections,
		MaxHeaderBytes: maxHeaderBytes, ReadTimeout: readTimeout, RefuseOrigin: true, ExactHost: true,
		Metrics: fm, MetricsHandler: reg.Handler()}, mux)
	go drainWhilePoisoned(ctx, front, w)
	tokenFile, err := publishServing(owner, ls, o.tokenFile)
	if err != nil {
		return err
	}
	errs := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errs <- front.Serve(l) }()
	}
	log.Info("serving", "listen", fmt.Sprint(ls[0].Addr()), "token_file", tokenFile, "socket_activated", systemd.Activated())
	// Recovery is done (the owner directory, the poisoning state, the
	// first call's sandbox) and the listeners serve.
	notify.Ready(fmt.Sprintf("serving %s on %s", kind, ls[0].Addr()))
	go func() {
		if err := notify.Watchdog(ctx, w.Healthy); err != nil {
			log.Warn("watchdog", "err", err)
		}
	}()
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-errs:
		log.Error("listener failed, stopping", "err", failed)
	}
	if err := stopHTTP(log, notify, front, server, w); err != nil {
		return err
	}
	return failed
}

// httpListeners are systemd's sockets when it activated this process,
// else a listener on listen (which must then be set).
func httpListeners(listen string) ([]net.Listener, error) {
	if systemd.Activated() {
		named, err := systemd.Listeners()
		if err != nil {
			return nil, err
		}
		var ls []net.Listener
		for _, l := range named {
			ls = append(ls, l...)
		}
		return ls, nil
	}
	if listen == "" {
		return nil, errors.New("--transport http needs --listen 127.0.0.1:PORT (or systemd's socket)")
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	return []net.Listener{l}, nil
}

// drainWhilePoisoned keeps front's /ready at 503 while the worker is
// poisoned (its clean-up uncertain), until ctx ends.
func drainWhilePoisoned(ctx context.Context, front *httpfront.Front, w *validate.Worker) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		front.SetDraining(w.Poisoned() != "")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishServing writes the TCP addresses of ls and the absolute path of
// tokenFile into owner's record, and returns that path. On an error it
// closes ls.
func publishServing(owner *validate.Owner, ls []net.Listener, tokenFile string) (string, error) {
	var tcp []string
	for _, l := range ls {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			tcp = append(tcp, a.String())
		}
	}
	if abs, err := filepath.Abs(tokenFile); err == nil {
		tokenFile = abs
	}
	if err := owner.SetServing(tcp, tokenFile); err != nil {
		for _, l := range ls {
			l.Close()
		}
		return "", err
	}
	return tokenFile, nil
}

// stopHTTP stops serving: admission closes (/ready 503, calls refused), a
// call in progress and its clean-up finish, then the sessions end (their
// streams would hold the listener's shutdown) and the listener stops;
// its error is the front's shutdown's.
func stopHTTP(log *slog.Logger, notify *systemd.Notifier, front *httpfront.Front, server *mcp.Server, w *validate.Worker) error {
	front.SetDraining(true)
	notify.Stopping("stopping: waiting for a call in progress and its clean-up")
	wctx, wcancel := context.WithTimeout(context.Background(), stopWait(w.Kind()))
	defer wcancel()
	if err := w.Close(wctx); err != nil {
		log.Error("stop the worker", "err", err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		log.Warn("sessions still closing after 5 s")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return front.Shutdown(sctx)
}

// mcpFront is the /mcp handler before the SDK's: a POST's body is
// bounded in size, in concurrent readers and in time, checked on its raw
// bytes, and an initialize takes one of the session slots; a session's
// DELETE retires its call in flight.
type mcpFront struct {
	log    *slog.Logger
	server *mcp.Server
	calls  *validate.Calls
	// mcp is the SDK's Streamable HTTP handler of server.
	mcp   http.Handler
	slots *sessionSlots
	// readers is held by each POST while it is served (its body read).
	readers chan struct{}
}

// newMCPFront is the /mcp handler of server, whose calls are calls, its
// sessions closed after sessionIdle unused.
func newMCPFront(log *slog.Logger, server *mcp.Server, calls *validate.Calls, sessionIdle time.Duration) *mcpFront {
	return &mcpFront{log: log, server: server, calls: calls,
		mcp: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
			&mcp.StreamableHTTPOptions{SessionTimeout: sessionIdle}),
		slots: &sessionSlots{max: maxSessions}, readers: make(chan struct{}, maxBodyReaders)}
}

// ServeHTTP implements http.Handler: a POST through servePost, a DELETE
// after retiring its session's call, anything else as the SDK does.
func (f *mcpFront) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		f.servePost(rw, r)
		return
	case http.MethodDelete:
		// A session's DELETE retires its call in flight (the worker
		// stays taken until the sandbox is gone).
		if id := r.Header.Get("Mcp-Session-Id"); id != "" && f.calls.Retire(id) {
			f.log.Info("session deleted: its call is retired", "session", id)
		}
	}
	f.mcp.ServeHTTP(rw, r)
}

// servePost serves a POST on one of the readers' slots, held until it
// is served: its body read and checked, then an initialize on a session
// slot, anything else as the SDK does.
func (f *mcpFront) servePost(rw http.ResponseWriter, r *http.Request) {
	if r.ContentLength > maxBodyBytes {
		http.Error(rw, fmt.Sprintf("request body over %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
		return
	}
	select {
	case f.readers <- struct{}{}:
		defer func() { <-f.readers }()
	default:
		rw.Header().Set("Retry-After", "1")
		http.Error(rw, fmt.Sprintf("more than %d requests are sending their bodies", maxBodyReaders), http.StatusServiceUnavailable)
		return
	}
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	// Only an initialize opens a session: a client of the stateless
	// revision sends every request without a session id.
	if r.Header.Get("Mcp-Session-Id") == "" && isInitialize(body) {
		if !f.slots.reserve() {
			rw.Header().Set("Retry-After", "5")
			http.Error(rw, fmt.Sprintf("%d sessions are open or opening: at most %d", maxSessions, maxSessions), http.StatusServiceUnavailable)
			return
		}
		f.slots.serveInitialize(rw, r, f.mcp, f.server)
		return
	}
	f.mcp.ServeHTTP(rw, r)
}

// readBody reads r's body, at most maxBodyBytes within the server's read
// deadline, and checks its raw bytes as a JSON-RPC frame; false: it
// answered rw with why not.
func (f *mcpFront) readBody(rw http.ResponseWriter, r *http.Request) ([]byte, bool) {
	r.Body = http.MaxBytesReader(rw, r.Body, maxBodyBytes)
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	var nerr net.Error
	switch {
	case errors.As(err, &tooBig):
		http.Error(rw, fmt.Sprintf("request body over %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
		return nil, false
	case errors.As(err, &nerr) && nerr.Timeout():
		// The server's read deadline: headers and body in 10 s.
		rw.Header().Set("Connection", "close")
		http.Error(rw, fmt.Sprintf("request body not received within %s", readTimeout), http.StatusRequestTimeout)
		return nil, false
	case err != nil:
		http.Error(rw, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
		return nil, false
	}
	// The raw bytes, before the SDK decodes them: encoding/json
	// would turn invalid UTF-8 and lone surrogates into U+FFFD,
	// and the verdict would attest text the client never sent.
	if err := stdiorpc.CheckFrame(body, stdiorpc.DefaultMaxDepth); err != nil {
		code := int64(jsonrpc.CodeParseError)
		var fe *stdiorpc.FrameError
		if errors.As(err, &fe) && fe.Invalid {
			code = jsonrpc.CodeInvalidRequest
		}
		f.log.Warn("refused a request body", "code", code, "why", err.Error())
		writeRPCError(rw, http.StatusBadRequest, code, "request body refused: "+err.Error())
		return nil, false
	}
	return body, true
}

// tokenCommand is the command that prints the worker's token, named in
// a 401: sodactl validate token KIND, with the state directory when it is
// not the default (a worker run from a clone).
func tokenCommand(kind, stateDir string) string {
	cmd := "sodactl validate token " + kind
	if filepath.Clean(stateDir) != validate.DefaultStateDir {
		if abs, err := filepath.Abs(stateDir); err == nil {
			stateDir = abs
		}
		cmd += " --state-dir " + stateDir
	}
	return cmd
}

// writeRPCError answers a request that was not processed with a JSON-RPC
// error response (id null: the request's id was not read) and status.
func writeRPCError(rw http.ResponseWriter, status int, code int64, msg string) {
	b, _ := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      *int           `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", nil, &jsonrpc.Error{Code: code, Message: msg}})
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = rw.Write(append(b, '\n'))
}

// isInitialize reports whether a JSON-RPC body (a message or a batch)
// holds an initialize request.
func isInitialize(body []byte) bool {
	var one struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &one) == nil {
		return one.Method == "initialize"
	}
	var batch []struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &batch) == nil {
		for _, m := range batch {
			if m.Method == "initialize" {
				return true
			}
		}
	}
	return false
}
