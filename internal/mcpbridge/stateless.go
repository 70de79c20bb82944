package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soda-project/soda/internal/child"
)

// Stateless clients (revision 2026-07-28, SEP-2575) send every request on
// its own, with the protocol version, client info and capabilities in
// params._meta, and hold no session. A stdio child, however, expects one
// initialize and then a stream of requests. The bridge maps the two like
// this:
//
//   - All stateless requests of a bridge share one child, started on the
//     first such request and initialized by the bridge itself with the newest
//     sessionful revision (2025-11-25) and no client capabilities. It ends
//     after IdleTimeout without requests, and does not count against
//     MaxSessions.
//   - server/discover is answered by the bridge from the child's initialize
//     result: capabilities, instructions and serverInfo of the real server,
//     and the revisions the bridge supports.
//   - Request ids are rewritten to ids unique within the child, and
//     restored in the answers, so concurrent clients cannot collide.
//     Progress notifications reach the POST of the request that carried the
//     progress token.
//   - Requests from the child to the client (sampling, elicitation, roots)
//     are answered with an error by the bridge: a stateless client has no
//     channel to receive them.
//   - The request rules of 2026-07-28 are checked by the bridge
//     (stateless_rules.go), results get what that revision requires
//     (stateless_result.go), and the child's list_changed and
//     resources/updated notifications go to subscriptions/listen streams
//     (stateless_listen.go); other notifications not tied to a request are
//     dropped.
type sharedChild struct {
	b *Bridge

	mu       sync.Mutex
	s        *Session
	init     json.RawMessage // the child's initialize result
	starting chan struct{}
	err      error
	lastUsed time.Time

	next atomic.Int64
}

// get returns the shared child, starting and initializing it if needed.
// The start runs under the bridge's lifetime (bounded by StartTimeout), not
// under ctx: every requester waits for it with its own ctx, so one client
// leaving does not fail the others.
func (sc *sharedChild) get(ctx context.Context) (*Session, json.RawMessage, error) {
	for {
		sc.mu.Lock()
		if sc.s != nil {
			select {
			case <-sc.s.dead:
				sc.s = nil
			default:
				s, init := sc.s, sc.init
				sc.lastUsed = time.Now()
				sc.mu.Unlock()
				return s, init, nil
			}
		}
		ch := sc.starting
		if ch == nil {
			if sc.b.Draining() {
				sc.mu.Unlock()
				return nil, nil, errDraining
			}
			ch = make(chan struct{})
			sc.starting = ch
			go sc.startShared(ch)
		}
		sc.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		sc.mu.Lock()
		err := sc.err
		sc.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
	}
}

// startShared starts the shared child under the bridge's context and
// publishes the outcome, then closes done.
func (sc *sharedChild) startShared(done chan struct{}) {
	ctx, cancel := context.WithTimeout(sc.b.ctx, sc.b.opts.StartTimeout)
	defer cancel()
	s, init, err := sc.start(ctx)
	sc.mu.Lock()
	sc.s, sc.init, sc.err, sc.starting = s, init, err, nil
	sc.lastUsed = time.Now()
	sc.mu.Unlock()
	close(done)
	// Shutdown may have looked for the shared child before it was set.
	if s != nil && sc.b.Draining() {
		s.end("server shutting down")
	}
}

func (sc *sharedChild) start(ctx context.Context) (*Session, json.RawMessage, error) {
	b := sc.b
	id := "stateless-" + newSessionID()[:8]
	log := b.log.With("session", id)
	if !b.addChild() {
		return nil, nil, errDraining
	}
	proc, err := child.Start(ctx, log, b.opts.Placer, id, b.opts.Spec)
	if err != nil {
		b.children.Done()
		return nil, nil, err
	}
	b.live.Add(1)
	b.opts.Metrics.ChildStarted()
	s := newSession(id, log, proc, b.opts.Grace, b.opts.StderrLinesPerSecond, b.opts.Metrics, false, nil, func(*Session) { b.live.Add(-1); b.children.Done() })
	s.shared = true
	s.fromChild = b.inputs.fromChild
	s.listeners = newListenHub(s)
	log.Info("stateless child start", "pid", proc.Pid(), "group", proc.Group().String())

	st := newStream(false)
	reqID := "soda-init"
	m := message{
		raw:  fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{},"sampling":{}},"clientInfo":{"name":"soda-mcpd","version":"stateless-bridge"}}}`, reqID),
		kind: kindRequest, id: "s:" + reqID, method: "initialize",
	}
	if _, err := s.register(st, []message{m}); err != nil {
		// The server exited at once: what it said on stderr is the
		// reason, once it is read.
		return nil, nil, errors.New(s.goneMessageAfterExit())
	}
	defer s.detach(st, "")
	if err := s.write(m.raw); err != nil {
		// The server exited before reading.
		select {
		case <-s.dead:
			return nil, nil, errors.New(s.goneMessageAfterExit())
		case <-time.After(2 * time.Second):
		}
		s.end("initialize: " + err.Error())
		return nil, nil, err
	}
	timer := time.NewTimer(b.opts.StartTimeout)
	defer timer.Stop()
	select {
	case it := <-st.ch:
		var resp struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(it.raw, &resp); err != nil || resp.Result == nil {
			s.end("initialize failed")
			return nil, nil, fmt.Errorf("the MCP server refused initialize: %s", truncate(resp.Error, 300))
		}
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(resp.Result, &res)
		s.setProtocolVersion(res.ProtocolVersion)
		if err := s.write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
			s.end("initialized: " + err.Error())
			return nil, nil, err
		}
		return s, resp.Result, nil
	case <-s.dead:
		return nil, nil, errors.New(s.goneMessageAfterExit())
	case <-timer.C:
		s.end("initialize not answered")
		return nil, nil, fmt.Errorf("the MCP server did not answer initialize within %s", b.opts.StartTimeout)
	case <-ctx.Done():
		s.end("start abandoned: " + context.Cause(ctx).Error())
		return nil, nil, fmt.Errorf("start the MCP server: %w", context.Cause(ctx))
	}
}

func (sc *sharedChild) expireIdle(now time.Time) {
	sc.mu.Lock()
	s := sc.s
	idle := s != nil && now.Sub(sc.lastUsed) > sc.b.opts.IdleTimeout
	sc.mu.Unlock()
	if !idle {
		return
	}
	if _, ok := s.idleSince(); ok {
		s.end(fmt.Sprintf("stateless child idle for %s", sc.b.opts.IdleTimeout))
	}
}

func (sc *sharedChild) shutdown() {
	sc.mu.Lock()
	s := sc.s
	sc.mu.Unlock()
	if s != nil {
		s.end("server shutting down")
	}
}

// serveStateless serves a POST of the stateless revision.
func (b *Bridge) serveStateless(w http.ResponseWriter, r *http.Request, msgs []message, batch bool, ver string, sse bool) {
	if batch {
		httpError(w, http.StatusBadRequest, "", codeInvalidRequest, "JSON-RPC batches are not allowed in protocol revision "+versionStateless)
		return
	}
	m := msgs[0]
	if m.kind == kindRequest {
		if e := checkStateless(r, m, ver); e != nil {
			e.write(w, rawID(m.id))
			return
		}
	}
	if m.kind != kindRequest {
		// Notifications and responses have no session to go to.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	s, init, err := b.shared.get(r.Context())
	if err != nil {
		if errors.Is(err, errDraining) {
			b.tooBusy(w, m.id, err)
			return
		}
		httpError(w, http.StatusBadGateway, m.id, codeServerGone, "cannot start the MCP server: "+err.Error())
		return
	}
	switch m.method {
	case "server/discover":
		writeDiscover(w, rawID(m.id), init)
		return
	case "subscriptions/listen":
		b.serveListen(w, r, s, init, m)
		return
	}
	handled, release := b.inputs.serve(w, r, s, m, sse)
	if handled {
		return
	}
	defer release()
	newID := "soda-" + strconv.FormatInt(b.shared.next.Add(1), 10)
	st := newStream(sse)
	st.origIDs = map[string]json.RawMessage{"s:" + newID: rawID(m.id)}
	st.stateless = &statelessCall{method: m.method}
	fwd := m
	fwd.raw = rewriteID(m.raw, json.RawMessage(strconv.Quote(newID)))
	fwd.id = "s:" + newID
	b.relay(w, r, s, []message{fwd}, false, st, relayOpts{timeout: b.opts.CallTimeout})
}

// writeDiscover answers server/discover from the child's initialize result.
func writeDiscover(w http.ResponseWriter, id json.RawMessage, init json.RawMessage) {
	var res struct {
		Capabilities json.RawMessage `json:"capabilities"`
		Instructions string          `json:"instructions,omitempty"`
		ServerInfo   json.RawMessage `json:"serverInfo"`
	}
	_ = json.Unmarshal(init, &res)
	if res.Capabilities == nil {
		res.Capabilities = json.RawMessage("{}")
	}
	out := map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"result": map[string]any{
			"supportedVersions": SupportedVersions(),
			"capabilities":      res.Capabilities,
			"instructions":      res.Instructions,
			"ttlMs":             0,
			"cacheScope":        "private",
			"resultType":        "complete",
			"_meta":             map[string]any{"io.modelcontextprotocol/serverInfo": res.ServerInfo},
		},
	}
	body, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
