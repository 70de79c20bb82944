package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/soda-project/soda/internal/logevent"
)

// Paths served by the bridge.
const (
	PathMCP     = "/mcp"
	PathSSE     = "/sse"
	PathMessage = "/message"
)

// Header names of the Streamable HTTP transport.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
)

// versionStateless is the first revision without sessions (SEP-2575).
const versionStateless = "2026-07-28"

// Handler returns the handler for the MCP endpoints. Authentication, Host
// and Origin checks and listener bounds are the caller's (see httpfront).
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PathMCP, b.serveMCP)
	mux.HandleFunc("GET "+PathSSE, b.serveLegacySSE)
	mux.HandleFunc("POST "+PathMessage, b.serveLegacyMessage)
	return mux
}

func (b *Bridge) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		b.servePost(w, r)
	case http.MethodGet:
		b.serveGet(w, r)
	case http.MethodDelete:
		b.serveDelete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, http.StatusMethodNotAllowed, "", codeInvalidRequest, "method not allowed: use POST, GET or DELETE")
	}
}

// httpError writes a JSON-RPC error body with an HTTP status.
func httpError(w http.ResponseWriter, status int, idKey string, code int, msg string) {
	httpErrorData(w, status, idJSON(idKey), code, msg, nil)
}

func httpErrorData(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(errorResponseID(id, code, msg, data))
	w.Write([]byte("\n"))
}

func idJSON(key string) json.RawMessage {
	if key == "" {
		return json.RawMessage("null")
	}
	return rawID(key)
}

func supported(v string) bool { return slices.Contains(supportedVersions, v) }

// batchAllowed reports whether a revision allows JSON-RPC batches: only
// 2025-03-26 (and the legacy SSE transport of 2024-11-05) do.
func batchAllowed(v string) bool { return v == "2025-03-26" || v == "2024-11-05" }

// accepts reports whether the request's Accept header admits typ. A missing
// header or */* admits everything.
func accepts(r *http.Request, typ string) bool {
	h := r.Header.Values("Accept")
	if len(h) == 0 {
		return true
	}
	major, _, _ := strings.Cut(typ, "/")
	for _, v := range h {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			mt = strings.TrimSpace(mt)
			if mt == typ || mt == "*/*" || mt == major+"/*" {
				return true
			}
		}
	}
	return false
}

func (b *Bridge) tooBusy(w http.ResponseWriter, idKey string, err error) {
	w.Header().Set("Retry-After", "5")
	msg := fmt.Sprintf("%s: this MCP server allows %d live sessions and every one is busy (a request in flight or a stream open); retry later", err, b.opts.MaxSessions)
	switch {
	case errors.Is(err, errDraining):
		msg = "server is draining for shutdown or restart; retry in a few seconds"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client left while an evicted child was stopping.
		httpError(w, http.StatusServiceUnavailable, idKey, codeBusy, err.Error())
		return
	}
	if errors.Is(err, errDraining) {
		b.opts.Metrics.SessionRefused("draining")
	} else {
		b.opts.Metrics.SessionRefused("busy")
		b.opts.Metrics.LimitHit("sessions")
	}
	b.log.Warn("limit hit", logevent.LimitHit, "limit", "sessions", "max_sessions", b.opts.MaxSessions, "err", err)
	httpError(w, http.StatusServiceUnavailable, idKey, codeBusy, msg)
}

// readBody reads a POST body within the size limit and clears the read
// deadline so that long responses are not cut by the server's ReadTimeout.
func (b *Bridge) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			httpError(w, http.StatusUnsupportedMediaType, "", codeInvalidRequest, "Content-Type must be application/json")
			return nil, false
		}
	}
	limit := b.opts.MaxBodyBytes
	if limit <= 0 {
		limit = 4 << 20
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			b.opts.Metrics.LimitHit("body")
			b.log.Warn("limit hit", logevent.LimitHit, "limit", "body", "max_bytes", limit, "remote", r.RemoteAddr)
			httpError(w, http.StatusRequestEntityTooLarge, "", codeInvalidRequest, fmt.Sprintf("request body exceeds %d bytes", limit))
			return nil, false
		}
		b.log.Warn("read request body", "err", err, "remote", r.RemoteAddr)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			httpError(w, http.StatusRequestTimeout, "", codeInvalidRequest, "could not read the request body in time: "+err.Error())
			return nil, false
		}
		// Broken framing (a bad chunk size, say) or a body cut short.
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest, "malformed request body: "+err.Error())
		return nil, false
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, true
}

func (b *Bridge) servePost(w http.ResponseWriter, r *http.Request) {
	ver := r.Header.Get(headerProtocolVersion)
	if !accepts(r, "application/json") && !accepts(r, "text/event-stream") {
		httpError(w, http.StatusNotAcceptable, "", codeInvalidRequest, "Accept must include application/json or text/event-stream")
		return
	}
	body, ok := b.readBody(w, r)
	if !ok {
		return
	}
	msgs, batch, err := splitBody(body)
	if err != nil {
		code := codeInvalidRequest
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(body) {
			code = codeParseError
		}
		httpError(w, http.StatusBadRequest, "", code, err.Error())
		return
	}
	if ver != "" && !supported(ver) {
		// Answered with the request's id, so a client can tell which of its
		// requests was refused.
		id := json.RawMessage("null")
		if !batch && msgs[0].kind == kindRequest {
			id = rawID(msgs[0].id)
		}
		unsupportedVersion(ver).write(w, id)
		return
	}
	sse := accepts(r, "text/event-stream")
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		// A request of the stateless revision (by header or _meta) is one
		// even when it is initialize, which that revision removed.
		stateless := ver >= versionStateless || msgs[0].protocolVersion != ""
		if !stateless && !batch && msgs[0].kind == kindRequest && msgs[0].method == "initialize" {
			b.initialize(w, r, msgs[0], sse)
			return
		}
		if stateless {
			b.serveStateless(w, r, msgs, batch, ver, sse)
			return
		}
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest, "missing Mcp-Session-Id header: send initialize first to start a session")
		return
	}
	s := b.lookup(sid)
	if s == nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: initialize a new one")
		return
	}
	if batch && !batchAllowed(s.ProtocolVersion()) {
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest,
			fmt.Sprintf("JSON-RPC batches are not allowed in protocol revision %s (only 2025-03-26 allows them)", s.ProtocolVersion()))
		return
	}
	for _, m := range msgs {
		if m.method == "initialize" {
			httpError(w, http.StatusBadRequest, m.id, codeInvalidRequest, "session is already initialized")
			return
		}
	}
	b.relay(w, r, s, msgs, batch, newStream(sse), relayOpts{timeout: b.opts.CallTimeout})
}

// relayOpts tunes relay for initialize and stateless requests.
type relayOpts struct {
	timeout time.Duration
	// init marks the initialize POST of a new session: failures before the
	// answer end the session and are reported with HTTP 502.
	init bool
}

// relay forwards msgs to the session's child and streams back the answers
// and everything routed to st.
func (b *Bridge) relay(w http.ResponseWriter, r *http.Request, s *Session, msgs []message, batch bool, st *stream, o relayOpts) {
	if !s.begin() {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: initialize a new one")
		return
	}
	defer s.done()
	b.inflight.Add(1)
	defer b.inflight.Add(-1)

	var reqs []message
	for _, m := range msgs {
		if m.kind == kindRequest {
			reqs = append(reqs, m)
		}
	}
	out := &responder{w: w, rc: http.NewResponseController(w), st: st, batch: batch, init: o.init, s: s, b: b, wrote: make(chan struct{})}
	if len(reqs) == 0 {
		for _, m := range msgs {
			if m.method == "notifications/cancelled" && m.requestID != "" {
				s.clientCancelled(m.requestID)
			}
			if err := s.write(m.raw); err != nil {
				httpError(w, http.StatusNotFound, "", codeServerGone, "session ended: "+err.Error())
				return
			}
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if !batch && len(reqs) == 1 && !o.init && st.origIDs == nil {
		st.direct = out.direct
	}
	dup, err := s.register(st, reqs)
	if err != nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: initialize a new one")
		return
	}
	s.attach(st, false)
	detachReason := ""
	defer func() { s.detach(st, detachReason) }()
	// If the stdout reader took the response, it may still be writing it:
	// the handler must not return before it is done.
	defer func() {
		if out.owner.Load() == 1 {
			<-out.wrote
		}
	}()

	remaining := make(map[string]struct{}, len(reqs))
	for _, m := range reqs {
		if !slices.Contains(dup, m.id) {
			remaining[m.id] = struct{}{}
		}
	}
	for _, m := range msgs {
		if m.kind == kindRequest && slices.Contains(dup, m.id) {
			continue
		}
		if m.method == "notifications/cancelled" && m.requestID != "" {
			s.clientCancelled(m.requestID)
		}
		if err := s.write(m.raw); err != nil {
			s.log.Warn("MCP server does not read its stdin, ending session", "err", err)
			s.end("MCP server stopped reading its input: " + err.Error())
			break
		}
	}
	s.calls.Add(int64(len(reqs)))
	b.calls.Add(int64(len(reqs)))
	if m := b.opts.Metrics; b.counted {
		for _, q := range reqs {
			m.Calls(q.method, 1)
		}
		first, t0 := reqs[0].method, time.Now()
		defer func() { m.CallDone(first, time.Since(t0)) }()
	}
	for _, id := range dup {
		out.add(errorResponseID(st.idFor(id), codeInvalidRequest, errDuplicateID.Error(), nil), true, len(remaining) == 0)
	}

	timeout := o.timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	take := func(it item) {
		if it.respID != "" {
			if _, ok := remaining[it.respID]; !ok {
				return
			}
			delete(remaining, it.respID)
			if it.raw == nil { // written by the reader, or cancelled by the client
				return
			}
			out.add(it.raw, true, len(remaining) == 0)
			return
		}
		out.add(it.raw, false, false)
	}
	for len(remaining) > 0 {
		select {
		case it := <-st.ch:
			take(it)
			// Any sign of life (progress, logging) keeps the calls alive.
			timer.Reset(timeout)
		case <-s.dead:
			for drained := false; !drained; {
				select {
				case it := <-st.ch:
					take(it)
				default:
					drained = true
				}
			}
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range remaining {
					if !yield(id) {
						return
					}
				}
			})
			for _, id := range ids {
				delete(remaining, id)
				out.fail(errorResponseID(st.idFor(id), codeServerGone, s.goneMessage(), nil), len(remaining) == 0)
			}
		case <-r.Context().Done():
			if out.own() {
				detachReason = "client disconnected"
			}
			return
		case <-timer.C:
			ids := make([]string, 0, len(remaining))
			for id := range remaining {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			s.forget(st, ids, fmt.Sprintf("soda-mcpd: no answer within %s", timeout))
			b.opts.Metrics.LimitHit("call_timeout")
			b.log.Warn("limit hit", logevent.LimitHit, "limit", "call_timeout", "timeout", timeout.String(), "session", s.ID[:8], "requests", len(ids))
			for _, id := range ids {
				delete(remaining, id)
				out.add(errorResponseID(st.idFor(id), codeTimeout, fmt.Sprintf("the MCP server did not answer within %s; the request was cancelled", timeout), nil), true, len(remaining) == 0)
			}
		}
	}
	out.finish()
}

// responder writes the answer to one POST: a plain JSON body when the only
// thing to send is the response (or, for a batch, the responses), else an
// SSE stream with every message as one event.
type responder struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	st    *stream
	s     *Session
	b     *Bridge
	batch bool
	init  bool

	mode     int // 0 undecided, 1 json, 2 sse
	buffered [][]byte
	wroteErr bool
	// owner says who writes the response: 0 nobody yet, 1 the stdout
	// reader (direct), 2 the handler.
	owner atomic.Int32
	wrote chan struct{} // closed when the reader has written
}

// directMaxBytes bounds responses the stdout reader writes itself; the
// socket buffer takes them without blocking.
const directMaxBytes = 32 << 10

// own makes the handler the writer of the response. It fails if the reader
// has already taken it.
func (o *responder) own() bool {
	return o.owner.CompareAndSwap(0, 2) || o.owner.Load() == 2
}

// direct is stream.direct: the stdout reader writes a lone response.
func (o *responder) direct(raw []byte) bool {
	// Large answers go through the handler, so a slow client cannot stall
	// the reader (and with it the whole session) on a socket write.
	if len(raw) > directMaxBytes || !o.owner.CompareAndSwap(0, 1) {
		return false
	}
	o.writeJSON(raw)
	o.rc.Flush()
	close(o.wrote)
	return true
}

const (
	modeUndecided = iota
	modeJSON
	modeSSE
)

// add writes one message. resp marks a response to a request of this POST,
// final the last one.
func (o *responder) add(raw []byte, resp, final bool) {
	if !o.own() {
		return // the reader answered already; nothing else belongs here
	}
	if o.init && resp {
		o.checkInit(raw)
	}
	switch o.mode {
	case modeUndecided:
		if resp {
			if !o.batch && final {
				o.writeJSON(raw)
				return
			}
			o.buffered = append(o.buffered, raw)
			if final {
				o.writeJSONArray()
			}
			return
		}
		if !o.st.sse {
			o.s.log.Debug("message dropped: client does not accept text/event-stream on this POST")
			return
		}
		o.startSSE()
		for _, b := range o.buffered {
			o.event(b)
		}
		o.buffered = nil
		o.event(raw)
	case modeSSE:
		o.event(raw)
	}
}

// fail writes an error for a request whose session ended.
func (o *responder) fail(raw []byte, final bool) {
	if !o.own() {
		return
	}
	if o.init && o.mode == modeUndecided && !o.wroteErr {
		// The child died before answering initialize: no session was made.
		o.w.Header().Del(headerSessionID)
		o.wroteErr = true
		o.w.Header().Set("Content-Type", "application/json")
		o.w.WriteHeader(http.StatusBadGateway)
		o.w.Write(append(raw, '\n'))
		o.mode = modeJSON
		return
	}
	o.add(raw, true, final)
}

// checkInit looks at the answer to initialize: the negotiated revision is
// kept; an error answer ends the session.
func (o *responder) checkInit(raw []byte) {
	var resp struct {
		Result *struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil || resp.Result == nil {
		o.w.Header().Del(headerSessionID)
		o.s.end("initialize failed: " + truncate(resp.Error, 200))
		return
	}
	o.s.setProtocolVersion(resp.Result.ProtocolVersion)
	o.s.log.Info("session initialized", "protocol_version", resp.Result.ProtocolVersion)
}

func (o *responder) writeJSON(raw []byte) {
	o.mode = modeJSON
	h := o.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", fmt.Sprint(len(raw)))
	status := http.StatusOK
	if o.st.stateless != nil {
		status = o.st.stateless.httpStatus(raw)
	}
	o.w.WriteHeader(status)
	o.w.Write(raw)
}

func (o *responder) writeJSONArray() {
	n := 2
	for _, b := range o.buffered {
		n += len(b) + 1
	}
	buf := make([]byte, 0, n)
	buf = append(buf, '[')
	for i, b := range o.buffered {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	buf = append(buf, ']')
	o.buffered = nil
	o.writeJSON(buf)
}

func (o *responder) startSSE() {
	o.mode = modeSSE
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	o.w.WriteHeader(http.StatusOK)
}

func (o *responder) event(raw []byte) {
	writeEvent(o.w, "message", raw)
	if len(o.st.ch) == 0 {
		o.rc.Flush()
	}
}

func (o *responder) finish() {
	if !o.own() {
		return
	}
	switch o.mode {
	case modeUndecided:
		if len(o.buffered) > 0 {
			o.writeJSONArray()
			return
		}
		// Every request was cancelled by the client: nothing to answer.
		o.w.WriteHeader(http.StatusAccepted)
	case modeSSE:
		o.rc.Flush()
	}
}

func writeEvent(w io.Writer, event string, data []byte) {
	buf := make([]byte, 0, len(data)+32)
	buf = append(buf, "event: "...)
	buf = append(buf, event...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	w.Write(buf)
}

// initialize starts a session for an initialize request.
func (b *Bridge) initialize(w http.ResponseWriter, r *http.Request, m message, sse bool) {
	if err := b.reserve(r.Context()); err != nil {
		b.tooBusy(w, m.id, err)
		return
	}
	s, err := b.startSession(r.Context(), false)
	if err != nil {
		httpError(w, http.StatusBadGateway, m.id, codeServerGone, "cannot start the MCP server: "+err.Error())
		return
	}
	w.Header().Set(headerSessionID, s.ID)
	b.relay(w, r, s, []message{m}, false, newStream(sse), relayOpts{timeout: b.opts.StartTimeout, init: true})
	select {
	case <-s.dead:
		if s.first {
			b.reportFirst(s)
		}
		return
	default:
	}
	if s.ProtocolVersion() == "" {
		// No answer to initialize (client gone or timeout): nobody can use
		// this session.
		s.end("initialize was not answered")
	}
	if s.first {
		b.reportFirst(s)
	}
}

func (b *Bridge) serveGet(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		w.Header().Set("Allow", "POST, DELETE")
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest, "missing Mcp-Session-Id header: a GET stream belongs to a session")
		return
	}
	if !accepts(r, "text/event-stream") {
		httpError(w, http.StatusNotAcceptable, "", codeInvalidRequest, "Accept must include text/event-stream")
		return
	}
	s := b.lookup(sid)
	if s == nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: initialize a new one")
		return
	}
	st := newStream(true)
	if !s.attach(st, true) {
		if s.isEnded() {
			httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: initialize a new one")
			return
		}
		b.log.Warn("limit hit", logevent.LimitHit, "limit", "get_streams", "session", sid[:min(8, len(sid))])
		httpError(w, http.StatusConflict, "", codeInvalidRequest, "this session already has a GET stream open; only one is allowed")
		return
	}
	s.touch()
	defer func() {
		s.detach(st, "")
		s.touch() // idle from when the stream closed
	}()
	b.stream(w, r, s, st, nil)
}

// stream copies st to an SSE response until the client leaves or the
// session ends. first, if set, is written before anything else.
func (b *Bridge) stream(w http.ResponseWriter, r *http.Request, s *Session, st *stream, first func()) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if first != nil {
		first()
	}
	rc.Flush()
	keepalive := time.NewTicker(25 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case it := <-st.ch:
			if it.raw == nil {
				continue
			}
			writeEvent(w, "message", it.raw)
			if len(st.ch) == 0 {
				if err := rc.Flush(); err != nil {
					return
				}
			}
		case <-keepalive.C:
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case <-s.dead:
			for drained := false; !drained; {
				select {
				case it := <-st.ch:
					if it.raw != nil {
						writeEvent(w, "message", it.raw)
					}
				default:
					drained = true
				}
			}
			for _, id := range st.failed {
				writeEvent(w, "message", errorResponseID(st.idFor(id), codeServerGone, s.goneMessage(), nil))
			}
			rc.Flush()
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (b *Bridge) serveDelete(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest, "missing Mcp-Session-Id header")
		return
	}
	s := b.lookup(sid)
	if s == nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session")
		return
	}
	s.end("client ended the session (DELETE)")
	w.WriteHeader(http.StatusNoContent)
}

// serveLegacySSE serves the HTTP+SSE transport of 2024-11-05: the GET
// stream carries everything from the child, starting with the endpoint to
// POST messages to. The session lives as long as the stream.
func (b *Bridge) serveLegacySSE(w http.ResponseWriter, r *http.Request) {
	if err := b.reserve(r.Context()); err != nil {
		b.tooBusy(w, "", err)
		return
	}
	s, err := b.startSession(r.Context(), true)
	if err != nil {
		httpError(w, http.StatusBadGateway, "", codeServerGone, "cannot start the MCP server: "+err.Error())
		return
	}
	// The stream first: a legacy session lives as long as it, and a
	// session with an open stream is never evicted.
	st := newStream(true)
	s.attach(st, true)
	s.setProtocolVersion("2024-11-05")
	defer func() {
		s.detach(st, "")
		s.end("client closed the SSE stream")
	}()
	b.stream(w, r, s, st, func() {
		writeEvent(w, "endpoint", []byte(PathMessage+"?sessionId="+s.ID))
	})
}

func (b *Bridge) serveLegacyMessage(w http.ResponseWriter, r *http.Request) {
	s := b.lookup(r.URL.Query().Get("sessionId"))
	if s == nil || !s.legacy {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "unknown or expired session: open a new /sse stream")
		return
	}
	body, ok := b.readBody(w, r)
	if !ok {
		return
	}
	msgs, _, err := splitBody(body)
	if err != nil {
		httpError(w, http.StatusBadRequest, "", codeParseError, err.Error())
		return
	}
	if !s.begin() {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "session ended")
		return
	}
	defer s.done()
	var reqs []message
	for _, m := range msgs {
		if m.kind == kindRequest {
			reqs = append(reqs, m)
		}
	}
	st := s.legacyStream()
	if st == nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "session ended")
		return
	}
	dup, err := s.register(st, reqs)
	if err != nil {
		httpError(w, http.StatusNotFound, "", codeInvalidRequest, "session ended")
		return
	}
	for _, m := range msgs {
		if m.kind == kindRequest && slices.Contains(dup, m.id) {
			st.deliver(item{raw: errorResponseID(rawID(m.id), codeInvalidRequest, errDuplicateID.Error(), nil)})
			continue
		}
		if m.method == "notifications/cancelled" && m.requestID != "" {
			s.clientCancelled(m.requestID)
		}
		if err := s.write(m.raw); err != nil {
			s.end("MCP server stopped reading its input: " + err.Error())
			httpError(w, http.StatusBadGateway, "", codeServerGone, err.Error())
			return
		}
	}
	s.calls.Add(int64(len(reqs)))
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte("Accepted"))
}
