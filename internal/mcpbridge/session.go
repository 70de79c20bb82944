package mcpbridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/logevent"
)

// item is one child→client message handed to a stream.
type item struct {
	raw []byte
	// respID is the canonical id when raw answers a request of this stream.
	respID string
}

// stream is a destination for child→client messages: the SSE stream of a
// POST, the GET stream of a session, or a legacy SSE connection.
type stream struct {
	ch chan item
	// gone is closed when the HTTP handler that owns the stream returns.
	gone chan struct{}
	// sse reports whether the client accepts text/event-stream on it.
	sse bool
	// failed lists the ids that were pending on this stream when the
	// session ended; set before Session.dead is closed.
	failed []string
	// origIDs maps rewritten ids back to the client's (stateless mode).
	origIDs map[string]json.RawMessage
	// direct, when set, lets the stdout reader write the one response of a
	// single-request POST straight to the client, saving a goroutine switch
	// on the hot path. It reports false when the handler owns the response.
	direct func(raw []byte) bool
	// stateless, when set, translates the answer for a client of the
	// stateless revision (stateless_result.go).
	stateless *statelessCall
}

func newStream(sse bool) *stream {
	return &stream{ch: make(chan item, 16), gone: make(chan struct{}), sse: sse}
}

// deliver hands it to st, waiting while the client reads slowly; it drops
// the message if the handler has gone.
func (st *stream) deliver(it item) bool {
	select {
	case st.ch <- it:
		return true
	case <-st.gone:
		return false
	}
}

// pendingCall is a request of the client that the child has not answered.
type pendingCall struct {
	st *stream
	// token is the request's progress token, to unregister it on answer.
	token string
}

// Session is one client session bridged to one stdio child.
type Session struct {
	// ID is the Mcp-Session-Id (or legacy sessionId).
	ID string
	m  Metrics
	// client: a client's session (counted as one), not the stateless
	// revision's shared child.
	client bool

	log   *slog.Logger
	proc  *child.Process
	grace child.Grace
	// onEnd runs when the session ends; onStopped when its child is gone.
	onEnd     func(*Session)
	onStopped func(*Session)
	legacy    bool
	shared    bool // the stateless pool's child
	first     bool // the prestarted child: its initialize is the start-up check
	// fromChild, if set, may take a message of the shared child that is
	// not tied to a request (see inputManager.fromChild).
	fromChild func(*Session, message) bool
	// listeners are the subscriptions/listen streams of the stateless
	// pool's child; nil for other sessions.
	listeners *listenHub
	started   time.Time

	writeMu  sync.Mutex
	writeBuf []byte

	mu              sync.Mutex
	pending         map[string]*pendingCall
	tokens          map[string]*stream
	posts           []*stream // POST streams that accept SSE, oldest first
	get             *stream
	backlog         [][]byte
	dropped         int
	protocolVersion string
	ended           bool
	endReason       string
	inflight        int
	lastUsed        time.Time

	dead      chan struct{}
	stopped   chan struct{}
	stdoutEOF chan struct{}
	stderrEOF chan struct{} // closed when the child's stderr is read to its end

	stderrTail tail
	calls      atomic.Int64
}

// maxBacklog bounds messages kept for a GET stream that is not open yet.
const maxBacklog = 256

// maxLineBytes bounds one message from the child.
const maxLineBytes = 32 << 20

func newSession(id string, log *slog.Logger, proc *child.Process, grace child.Grace, stderrRate int, m Metrics, client bool, onEnd, onStopped func(*Session)) *Session {
	s := &Session{
		m:         m,
		client:    client,
		ID:        id,
		log:       log,
		proc:      proc,
		grace:     grace,
		onEnd:     onEnd,
		onStopped: onStopped,
		started:   time.Now(),
		pending:   map[string]*pendingCall{},
		tokens:    map[string]*stream{},
		lastUsed:  time.Now(),
		dead:      make(chan struct{}),
		stopped:   make(chan struct{}),
		stdoutEOF: make(chan struct{}),
		stderrEOF: make(chan struct{}),
	}
	go s.readStdout()
	go s.readStderr(stderrRate)
	go s.watchExit()
	return s
}

// EndReason says why the session ended.
func (s *Session) EndReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endReason
}

// ProtocolVersion is the revision negotiated by initialize.
func (s *Session) ProtocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.protocolVersion
}

func (s *Session) setProtocolVersion(v string) {
	s.mu.Lock()
	s.protocolVersion = v
	s.mu.Unlock()
}

// watchExit ends the session when the child exits. It gives the stdout
// reader a moment to hand over what the child wrote before exiting.
func (s *Session) watchExit() {
	<-s.proc.Exited()
	select {
	case <-s.stdoutEOF:
	case <-time.After(200 * time.Millisecond):
	}
	s.end(fmt.Sprintf("MCP server exited (%s)", s.proc.ExitStatus()))
}

func (s *Session) readStdout() {
	defer close(s.stdoutEOF)
	r := bufio.NewReaderSize(s.proc.Stdout, 64<<10)
	var long []byte
	tooLong := false
	garbage := rate.NewLimiter(1, 5)
	for {
		frag, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			switch {
			case tooLong:
			case len(long)+len(frag) > maxLineBytes:
				s.log.Warn("child message too large, dropped", "limit_bytes", maxLineBytes)
				tooLong, long = true, nil
			default:
				long = append(long, frag...)
			}
			continue
		}
		if tooLong {
			tooLong = false
		} else {
			line := append(long, frag...)
			if long == nil {
				line = bytes.Clone(frag)
			}
			s.m.Relayed(0, len(line))
			line = bytes.TrimRight(line, "\r\n")
			if len(bytes.TrimSpace(line)) > 0 {
				s.route(line, garbage)
			}
		}
		long = nil
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				s.log.Debug("read child stdout", "err", err)
			}
			return
		}
	}
}

// route sends one message from the child to the stream it belongs to.
func (s *Session) route(line []byte, garbage *rate.Limiter) {
	m, err := parseMessage(line)
	if err != nil {
		if garbage.Allow() {
			s.log.Warn("child wrote a non-JSON-RPC line on stdout, ignored", "line", truncate(line, 200), "err", err)
		}
		return
	}
	s.mu.Lock()
	switch m.kind {
	case kindResponse:
		pc := s.pending[m.id]
		if pc == nil {
			s.mu.Unlock()
			s.log.Debug("response for no pending request dropped", "id", m.id)
			return
		}
		delete(s.pending, m.id)
		if pc.token != "" {
			delete(s.tokens, pc.token)
		}
		s.mu.Unlock()
		raw := m.raw
		if orig, ok := pc.st.origIDs[m.id]; ok {
			raw = rewriteID(raw, orig)
		}
		if pc.st.stateless != nil {
			raw = pc.st.stateless.answer(raw)
		}
		if pc.st.direct != nil && pc.st.direct(raw) {
			// Written to the client by this goroutine; tell the handler.
			raw = nil
		}
		pc.st.deliver(item{raw: raw, respID: m.id})
		return
	case kindNotification:
		if m.progressToken != "" {
			if st := s.tokens[m.progressToken]; st != nil {
				s.mu.Unlock()
				st.deliver(item{raw: m.raw})
				return
			}
		}
	}
	if s.shared {
		s.mu.Unlock()
		// Input rounds first: they take the child's requests and its
		// notifications/cancelled for held calls (stateless_input.go).
		if s.fromChild != nil && s.fromChild(s, m) {
			return
		}
		if m.kind == kindNotification && s.listeners != nil {
			s.listeners.publish(m) // subscriptions/listen (stateless_listen.go)
			return
		}
		s.refuseShared(m)
		return
	}
	s.mu.Unlock()
	s.routeUnrelated(m.raw)
}

// routeUnrelated delivers a message not tied to a request: to the GET
// stream, else the newest POST stream in flight, else the backlog. A stream
// that closes while we wait is no longer a candidate, so we pick again.
func (s *Session) routeUnrelated(raw []byte) {
	for {
		s.mu.Lock()
		st := s.get
		if st == nil && len(s.posts) > 0 {
			st = s.posts[len(s.posts)-1]
		}
		if st == nil {
			if len(s.backlog) >= maxBacklog {
				s.backlog = s.backlog[1:]
				s.dropped++
			}
			s.backlog = append(s.backlog, raw)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if st.deliver(item{raw: raw}) {
			return
		}
	}
}

// refuseShared answers server→client requests from the stateless pool's
// child, which has no client to ask.
func (s *Session) refuseShared(m message) {
	if m.kind != kindRequest {
		s.log.Debug("notification from the stateless child dropped", "method", m.method)
		return
	}
	// Asking is translated into input rounds for a call whose client
	// declared the capability (stateless_input.go); this one did not, or
	// the request could not be tied to a call.
	code, msg, data := codeMethodNotFound, fmt.Sprintf("%s is not available: no stateless call of a client that can answer it is waiting", m.method), any(nil)
	if capName := inputCapability(m.method); capName != "" {
		code, data = codeMissingCapability, map[string]any{"requiredCapabilities": map[string]any{capName: map[string]any{}}}
		msg = fmt.Sprintf("%s is not available: the client did not declare the %q capability (MissingRequiredClientCapability)", m.method, capName)
	}
	resp := errorResponseID(rawID(m.id), code, msg, data)
	if err := s.write(resp); err != nil {
		s.log.Debug("refuse server request", "err", err)
	}
}

// tail keeps the last few stderr lines for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 3 {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, l)
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

func (s *Session) readStderr(perSecond int) {
	defer close(s.stderrEOF)
	r := bufio.NewReaderSize(s.proc.Stderr, 8<<10)
	lim := rate.NewLimiter(rate.Limit(perSecond), 2*perSecond)
	suppressed := 0
	for {
		frag, err := r.ReadSlice('\n')
		if len(frag) > 0 {
			line := string(bytes.TrimRight(frag, "\r\n"))
			if errors.Is(err, bufio.ErrBufferFull) {
				line += "…"
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = r.ReadSlice('\n')
				}
			}
			s.stderrTail.add(line)
			if lim.Allow() {
				if suppressed > 0 {
					s.log.Warn("child stderr rate-limited", "suppressed_lines", suppressed)
					suppressed = 0
				}
				s.log.Info("child stderr", logevent.ChildStderr, "line", line)
			} else {
				if suppressed == 0 {
					s.log.Warn("child stderr rate-limited: dropping lines", "lines_per_second", perSecond)
				}
				suppressed++
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if suppressed > 0 {
				s.log.Warn("child stderr rate-limited", "suppressed_lines", suppressed)
			}
			return
		}
	}
}

// write sends one message line to the child.
func (s *Session) write(raw []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.writeBuf = append(append(s.writeBuf[:0], raw...), '\n')
	_ = s.proc.Stdin.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.proc.Stdin.Write(s.writeBuf); err != nil {
		if cap(s.writeBuf) > 1<<20 {
			s.writeBuf = nil
		}
		return fmt.Errorf("write to MCP server: %w", err)
	}
	s.m.Relayed(len(s.writeBuf), 0)
	if cap(s.writeBuf) > 1<<20 {
		s.writeBuf = nil
	}
	return nil
}

// errSessionEnded is returned for work on a session that has ended.
var errSessionEnded = errors.New("session ended")

// errDuplicateID is returned when a client reuses an id still in flight.
var errDuplicateID = errors.New("a request with this id is already in flight")

// register records requests of st as pending. ids that are already in
// flight are refused and returned in dup.
func (s *Session) register(st *stream, reqs []message) (dup []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, errSessionEnded
	}
	for _, m := range reqs {
		if _, ok := s.pending[m.id]; ok {
			dup = append(dup, m.id)
			continue
		}
		pc := &pendingCall{st: st}
		if m.progressToken != "" {
			pc.token = m.progressToken
			s.tokens[m.progressToken] = st
		}
		s.pending[m.id] = pc
	}
	return dup, nil
}

// attach makes st a target for messages not tied to a request. get marks the
// session's GET stream; it returns false if one is already open or the
// session has ended.
func (s *Session) attach(st *stream, get bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if get {
		if s.get != nil || s.ended {
			return false
		}
		s.get = st
		// Hand over what waited for a GET stream.
		backlog := s.backlog
		s.backlog = nil
		if s.dropped > 0 {
			s.log.Warn("messages for the GET stream were dropped while none was open", "dropped", s.dropped)
			s.dropped = 0
		}
		go func() {
			for _, raw := range backlog {
				if !st.deliver(item{raw: raw}) {
					return
				}
			}
		}()
		return true
	}
	if st.sse {
		s.posts = append(s.posts, st)
	}
	return true
}

// detach forgets st. ids of st still pending are cancelled in the child
// with reason, unless the session has ended.
func (s *Session) detach(st *stream, reason string) {
	s.mu.Lock()
	if s.get == st {
		s.get = nil
	}
	for i, p := range s.posts {
		if p == st {
			s.posts = append(s.posts[:i], s.posts[i+1:]...)
			break
		}
	}
	var cancel []string
	for id, pc := range s.pending {
		if pc.st == st {
			delete(s.pending, id)
			if pc.token != "" {
				delete(s.tokens, pc.token)
			}
			cancel = append(cancel, id)
		}
	}
	ended := s.ended
	s.mu.Unlock()
	close(st.gone)
	// Messages handed to st that its handler did not write: requests and
	// notifications not tied to st's calls go elsewhere.
	for drained := false; !drained; {
		select {
		case it := <-st.ch:
			if it.respID == "" && it.raw != nil && !ended && !s.shared {
				s.routeUnrelated(it.raw)
			}
		default:
			drained = true
		}
	}
	if ended {
		return
	}
	for _, id := range cancel {
		s.cancelInChild(id, reason)
	}
}

// forget drops pending ids of st (cancelled by the client or timed out) and
// tells the child when reason is not empty.
func (s *Session) forget(st *stream, ids []string, reason string) {
	s.mu.Lock()
	var gone []string
	for _, id := range ids {
		if pc := s.pending[id]; pc != nil && pc.st == st {
			delete(s.pending, id)
			if pc.token != "" {
				delete(s.tokens, pc.token)
			}
			gone = append(gone, id)
		}
	}
	s.mu.Unlock()
	if reason == "" {
		return
	}
	for _, id := range gone {
		s.cancelInChild(id, reason)
	}
}

func (s *Session) cancelInChild(id, reason string) {
	msg := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":%q}}`, rawID(id), reason)
	if err := s.write(msg); err != nil {
		s.log.Debug("send cancellation", "id", id, "err", err)
	}
}

// isEnded reports whether end has begun.
func (s *Session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// begin marks a request as being served; done marks it finished.
func (s *Session) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.inflight++
	s.lastUsed = time.Now()
	return true
}

func (s *Session) done() {
	s.mu.Lock()
	s.inflight--
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// idleSince reports when the session was last used, and whether it is idle
// (no request in flight).
func (s *Session) idleSince() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUsed, s.inflight == 0
}

// end ends the session: every pending request is failed on its stream,
// every stream is told, and the child is stopped in the background.
func (s *Session) end(reason string) { s.endIf(reason, nil) }

// endIf ends the session like end if cond, checked under s.mu, holds (or
// is nil), and reports whether it did.
func (s *Session) endIf(reason string, cond func() bool) bool {
	s.mu.Lock()
	if s.ended || (cond != nil && !cond()) {
		s.mu.Unlock()
		return false
	}
	s.ended = true
	s.endReason = reason
	for id, pc := range s.pending {
		pc.st.failed = append(pc.st.failed, id)
	}
	s.pending = map[string]*pendingCall{}
	s.tokens = map[string]*stream{}
	s.mu.Unlock()
	close(s.dead)
	if s.onEnd != nil {
		s.onEnd(s)
	}
	if s.client {
		s.m.SessionEnded(endClass(reason))
	}
	s.log.Info("session end", logevent.SessionEnd, "reason", reason, "calls", s.calls.Load(), "duration", time.Since(s.started).Round(time.Millisecond).String())
	go func() {
		defer close(s.stopped)
		s.proc.Stop(s.grace)
		s.m.ChildExited(s.proc.ExitStatus())
		s.log.Info("child exit", logevent.ChildExit, "pid", s.proc.Pid(), "status", s.proc.ExitStatus(), "group", s.proc.Group().String())
		if s.onStopped != nil {
			s.onStopped(s)
		}
	}()
	return true
}

// evictableLocked reports whether the session may be ended to make room
// for a new one: initialized, nothing in flight, no GET or legacy SSE
// stream open. s.mu must be held.
func (s *Session) evictableLocked() bool {
	return !s.ended && s.protocolVersion != "" && s.inflight == 0 && s.get == nil
}

// Stopped is closed when the session's child and its group are gone.
func (s *Session) Stopped() <-chan struct{} { return s.stopped }

// clientCancelled stops waiting for a request the client cancelled with
// notifications/cancelled; the child is told by the forwarded notification.
func (s *Session) clientCancelled(id string) {
	s.mu.Lock()
	pc := s.pending[id]
	if pc != nil {
		delete(s.pending, id)
		if pc.token != "" {
			delete(s.tokens, pc.token)
		}
	}
	s.mu.Unlock()
	if pc != nil {
		go pc.st.deliver(item{respID: id})
	}
}

// touch records use of the session without a request in flight.
func (s *Session) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// legacyStream returns the SSE stream of a legacy session.
func (s *Session) legacyStream() *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get
}

// goneMessage explains why requests of an ended session fail.
// goneMessageAfterExit is goneMessage once the child is gone and its
// stderr read (waiting up to 2 s): what a server that died at start said.
func (s *Session) goneMessageAfterExit() string {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-s.dead:
	case <-t.C:
	}
	// Its stderr ends with it, or, when something of its group (the
	// supervisor) holds the pipe, once Stop has closed it.
	select {
	case <-s.stderrEOF:
	case <-s.stopped:
		<-s.stderrEOF
	case <-t.C:
	}
	return s.goneMessage()
}

func (s *Session) goneMessage() string {
	msg := s.EndReason()
	if t := s.stderrTail.String(); t != "" {
		msg += "; last stderr: " + t
	}
	return msg
}

// idFor returns the JSON id the client used for the canonical key.
func (st *stream) idFor(key string) json.RawMessage {
	if orig, ok := st.origIDs[key]; ok {
		return orig
	}
	return rawID(key)
}

// endClass is the metrics reason of a session's end.
func endClass(reason string) string {
	switch {
	case strings.Contains(reason, "(DELETE)"), strings.HasPrefix(reason, "client closed"):
		return "client"
	case strings.HasPrefix(reason, "evicted"):
		return "evicted"
	case strings.Contains(reason, " idle"):
		return "idle"
	case strings.HasPrefix(reason, "MCP server exited"), strings.Contains(reason, "stopped reading"):
		return "child_exit"
	case reason == "server shutting down":
		return "shutdown"
	}
	return "other"
}
