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
// (socket activation) or on listen, behind the token of tokenFile (made
// on the first start), until ctx ends; ready is closed once recovery is
// done (before it, and while the worker is poisoned, /ready is 503). The
// TCP addresses served and the token file go into owner's record, for
// "sodactl validate client-config".
func serveHTTP(ctx context.Context, log *slog.Logger, notify *systemd.Notifier, server *mcp.Server, calls *validate.Calls, w *validate.Worker, owner *validate.Owner, o opts, reg *metrics.Registry) error {
	listen, tokenFile := o.listen, o.tokenFile
	tok, err := token.Ensure(tokenFile)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	var ls []net.Listener
	if systemd.Activated() {
		named, err := systemd.Listeners()
		if err != nil {
			return err
		}
		for _, l := range named {
			ls = append(ls, l...)
		}
	} else {
		if listen == "" {
			return errors.New("--transport http needs --listen 127.0.0.1:PORT (or systemd's socket)")
		}
		l, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		ls = append(ls, l)
	}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{SessionTimeout: o.sessionIdle})
	slots := &sessionSlots{max: maxSessions}
	readers := make(chan struct{}, maxBodyReaders)
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if r.ContentLength > maxBodyBytes {
				http.Error(rw, fmt.Sprintf("request body over %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
				return
			}
			select {
			case readers <- struct{}{}:
				defer func() { <-readers }()
			default:
				rw.Header().Set("Retry-After", "1")
				http.Error(rw, fmt.Sprintf("more than %d requests are sending their bodies", maxBodyReaders), http.StatusServiceUnavailable)
				return
			}
			r.Body = http.MaxBytesReader(rw, r.Body, maxBodyBytes)
			// Only an initialize opens a session: a client of the stateless
			// revision sends every request without a session id.
			body, err := io.ReadAll(r.Body)
			var tooBig *http.MaxBytesError
			var nerr net.Error
			switch {
			case errors.As(err, &tooBig):
				http.Error(rw, fmt.Sprintf("request body over %d bytes", maxBodyBytes), http.StatusRequestEntityTooLarge)
				return
			case errors.As(err, &nerr) && nerr.Timeout():
				// The server's read deadline: headers and body in 10 s.
				rw.Header().Set("Connection", "close")
				http.Error(rw, fmt.Sprintf("request body not received within %s", readTimeout), http.StatusRequestTimeout)
				return
			case err != nil:
				http.Error(rw, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
				return
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
				log.Warn("refused a request body", "code", code, "why", err.Error())
				writeRPCError(rw, http.StatusBadRequest, code, "request body refused: "+err.Error())
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if r.Header.Get("Mcp-Session-Id") == "" && isInitialize(body) {
				if !slots.reserve() {
					rw.Header().Set("Retry-After", "5")
					http.Error(rw, fmt.Sprintf("%d sessions are open or opening: at most %d", maxSessions, maxSessions), http.StatusServiceUnavailable)
					return
				}
				slots.serveInitialize(rw, r, mcpHandler, server)
				return
			}
		}
		if r.Method == http.MethodDelete {
			// A session's DELETE retires its call in flight (the worker
			// stays taken until the sandbox is gone).
			if id := r.Header.Get("Mcp-Session-Id"); id != "" && calls.Retire(id) {
				log.Info("session deleted: its call is retired", "session", id)
			}
		}
		mcpHandler.ServeHTTP(rw, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	front := httpfront.New(log, httpfront.Options{Name: "validate-" + w.Kind().Name, Token: tok, TokenCommand: tokenCommand(w.Kind().Name, o.stateDir), MaxConnections: maxConnections,
		MaxHeaderBytes: maxHeaderBytes, ReadTimeout: readTimeout, RefuseOrigin: true, ExactHost: true,
		Metrics: metrics.NewHTTP(reg, "validate-"+w.Kind().Name), MetricsHandler: reg.Handler()}, mux)
	// /ready: 503 while draining or while clean-up is uncertain.
	go func() {
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
	}()
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
		return err
	}
	errs := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errs <- front.Serve(l) }()
	}
	log.Info("serving", "listen", fmt.Sprint(ls[0].Addr()), "token_file", tokenFile, "socket_activated", systemd.Activated())
	// Recovery is done (the owner directory, the poisoning state, the
	// first call's sandbox) and the listeners serve.
	notify.Ready(fmt.Sprintf("serving %s on %s", w.Kind().Name, ls[0].Addr()))
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
	// Stop: admission closes (/ready 503, calls refused), a call in
	// progress and its clean-up finish, then the sessions end (their
	// streams would hold the listener's shutdown) and the listener stops.
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
	if err := front.Shutdown(sctx); err != nil {
		return err
	}
	return failed
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
