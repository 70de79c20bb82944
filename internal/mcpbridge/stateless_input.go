package mcpbridge

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/logevent"
)

// Input requests for stateless clients (2026-07-28, SEP-2322).
//
// A child of an older revision asks its client something (elicitation,
// sampling, roots) with a request of its own while it serves a call. A
// stateless client has no channel for such requests; its revision instead
// answers the call with an InputRequiredResult:
//
//	{"resultType":"input_required",
//	 "inputRequests":{"input-1":{"method":"elicitation/create","params":{…}}},
//	 "requestState":"…"}
//
// and the client sends the same request again with
// params.inputResponses {"input-1": <the result>} and params.requestState.
//
// The bridge maps one onto the other. The child's call stays open on the
// bridge side (an inputCall); the child's requests are held and listed in
// the InputRequiredResult; requestState is an opaque random token naming
// the held call, bound to the caller's credential, the method and the tool,
// prompt or resource, usable once and for a bounded time. The follow-up's
// responses are written to the child as the answers to its requests, and
// the follow-up POST then waits for the call's final result, or for the
// next round of input requests.

// Bounds of the input translation.
const (
	// defaultInputTTL is how long a held call waits for the client's
	// follow-up before the child's requests are answered with an error and
	// the call is cancelled.
	defaultInputTTL = 5 * time.Minute
	// defaultInputGather is how long the bridge waits after the child's
	// first request for more before answering the client, so that requests
	// the child sends together reach the client in one round.
	defaultInputGather = 30 * time.Millisecond
	// defaultMaxInputCalls bounds the calls per bridge held for a client's
	// follow-up; a call that would be one more gets its child's requests
	// answered with an error instead.
	defaultMaxInputCalls = 64
	// maxInputsPerCall bounds the child's requests held for one call.
	maxInputsPerCall = 16
	// maxInputBytes bounds the size of the child's requests held for one
	// call.
	maxInputBytes = 1 << 20
)

// inputManager keeps the stateless calls that may ask for input.
type inputManager struct {
	b *Bridge

	mu       sync.Mutex
	ttl      time.Duration
	gather   time.Duration
	maxCalls int
	calls    map[string]*inputCall // by the child's id of the call
	states   map[string]*inputCall // by requestState token, held calls only
	held     map[string]*inputCall // by the child's id of a held request
	// plain counts calls of input methods from clients that declared no
	// capability to answer: they run the plain way, but the child's
	// requests could come from them too.
	plain int
}

func newInputManager(b *Bridge) *inputManager {
	return &inputManager{
		b: b, ttl: defaultInputTTL, gather: defaultInputGather, maxCalls: defaultMaxInputCalls,
		calls: map[string]*inputCall{}, states: map[string]*inputCall{}, held: map[string]*inputCall{},
	}
}

// inputCaps are the client capabilities a child's request needs.
type inputCaps struct{ elicitation, sampling, roots bool }

func (c inputCaps) any() bool { return c.elicitation || c.sampling || c.roots }

// inputCapability names the client capability a server→client request
// needs, or "" for a method that is not one.
func inputCapability(method string) string {
	switch method {
	case "elicitation/create":
		return "elicitation"
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	}
	return ""
}

func (c inputCaps) allows(method string) bool {
	switch method {
	case "elicitation/create":
		return c.elicitation
	case "sampling/createMessage":
		return c.sampling
	case "roots/list":
		return c.roots
	}
	return false
}

// inputParams are the fields of a stateless request the translation needs.
type inputParams struct {
	caps      inputCaps
	target    string // params.name or params.uri
	hasState  bool
	state     string
	responses json.RawMessage // params.inputResponses, as sent
}

func parseInputParams(raw []byte) inputParams {
	var env struct {
		Params struct {
			Meta struct {
				Caps map[string]json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
			} `json:"_meta"`
			Name           string          `json:"name"`
			URI            string          `json:"uri"`
			RequestState   *string         `json:"requestState"`
			InputResponses json.RawMessage `json:"inputResponses"`
		} `json:"params"`
	}
	_ = json.Unmarshal(raw, &env)
	p := env.Params
	has := func(k string) bool { v, ok := p.Meta.Caps[k]; return ok && !bytes.Equal(v, []byte("null")) }
	out := inputParams{
		caps:      inputCaps{elicitation: has("elicitation"), sampling: has("sampling"), roots: has("roots")},
		target:    p.Name + p.URI,
		responses: p.InputResponses,
	}
	if p.RequestState != nil {
		out.hasState, out.state = true, *p.RequestState
	}
	return out
}

// inputMethods are the requests on which 2026-07-28 allows an
// InputRequiredResult.
func inputMethod(method string) bool {
	return method == "tools/call" || method == "prompts/get" || method == "resources/read"
}

// owner binds a state to the caller's credential.
func owner(r *http.Request) [32]byte { return sha256.Sum256([]byte(r.Header.Get("Authorization"))) }

// heldInput is one request of the child waiting for the client's answer.
type heldInput struct {
	key      string          // the inputRequests key shown to the client
	childKey string          // canonical id of the child's request
	childID  json.RawMessage // the child's id, as it sent it
	method   string
	params   json.RawMessage
	size     int
}

// inputCall is a stateless call that may ask for input: it lives from the
// first POST until the child's final answer, across any number of rounds.
type inputCall struct {
	im     *inputManager
	s      *Session
	key    string // canonical id of the call in the child
	method string
	target string
	caps   inputCaps
	owner  [32]byte
	st     *stream

	reqs    chan heldInput // the child's requests, from the stdout reader
	cancels chan string    // the child cancelled one of its requests
	join    chan *inputRound
	done    chan struct{}

	// guarded by im.mu
	nheld, heldBytes int
	token            string
	running          bool // a POST waits on the call (else it is held)
}

// inputRound is one POST waiting on an inputCall.
type inputRound struct {
	id        json.RawMessage // the client's id of this POST
	responses map[string]json.RawMessage
	ev        chan roundEvent
	gone      chan struct{} // closed when the POST's handler returns
}

type roundEvent struct {
	raw  []byte
	last bool
}

func newRound(id json.RawMessage, responses map[string]json.RawMessage) *inputRound {
	return &inputRound{id: id, responses: responses, ev: make(chan roundEvent, 16), gone: make(chan struct{})}
}

// serve takes a stateless request if it belongs to the input translation:
// a follow-up carrying requestState, or a call that may ask for input from
// a client that declared a capability to answer. It reports whether it
// answered the request; if not, the caller serves it the plain way and
// calls release when done.
func (im *inputManager) serve(w http.ResponseWriter, r *http.Request, s *Session, m message, sse bool) (handled bool, release func()) {
	p := parseInputParams(m.raw)
	if p.hasState {
		im.followUp(w, r, m, p, sse)
		return true, nil
	}
	if !inputMethod(m.method) {
		return false, func() {}
	}
	if !p.caps.any() {
		im.mu.Lock()
		im.plain++
		im.mu.Unlock()
		return false, func() {
			im.mu.Lock()
			im.plain--
			im.mu.Unlock()
		}
	}
	newID := "soda-" + strconv.FormatInt(im.b.shared.next.Add(1), 10)
	c := &inputCall{
		im: im, s: s, key: "s:" + newID, method: m.method, target: p.target, caps: p.caps, owner: owner(r),
		st:   newStream(false),
		reqs: make(chan heldInput, maxInputsPerCall), cancels: make(chan string, maxInputsPerCall),
		join: make(chan *inputRound), done: make(chan struct{}), running: true,
	}
	im.mu.Lock()
	im.calls[c.key] = c
	im.mu.Unlock()

	fwd := m
	fwd.raw = rewriteID(m.raw, json.RawMessage(strconv.Quote(newID)))
	fwd.id = c.key
	if !s.begin() {
		im.drop(c)
		httpError(w, http.StatusBadGateway, m.id, codeServerGone, "the MCP server has stopped")
		return true, nil
	}
	if _, err := s.register(c.st, []message{fwd}); err != nil {
		s.done()
		im.drop(c)
		httpError(w, http.StatusBadGateway, m.id, codeServerGone, "the MCP server has stopped")
		return true, nil
	}
	rd := newRound(rawID(m.id), nil)
	go c.run(rd)
	s.calls.Add(1)
	im.b.calls.Add(1)
	im.b.opts.Metrics.Calls(m.method, 1)
	if err := s.write(fwd.raw); err != nil {
		s.log.Warn("MCP server does not read its stdin, ending session", "err", err)
		s.end("MCP server stopped reading its input: " + err.Error())
	}
	im.wait(w, r, s, rd, sse)
	return true, nil
}

// drop forgets a call that never started.
func (im *inputManager) drop(c *inputCall) {
	im.mu.Lock()
	delete(im.calls, c.key)
	im.mu.Unlock()
}

// followUp serves a request carrying requestState.
func (im *inputManager) followUp(w http.ResponseWriter, r *http.Request, m message, p inputParams, sse bool) {
	bad := func(msg string) { httpError(w, http.StatusOK, m.id, codeInvalidParams, msg) }
	var responses map[string]json.RawMessage
	if len(p.responses) > 0 && !bytes.Equal(p.responses, []byte("null")) {
		if err := json.Unmarshal(p.responses, &responses); err != nil {
			bad("inputResponses must be an object mapping input request keys to results")
			return
		}
		for k, v := range responses {
			if v = bytes.TrimSpace(v); len(v) == 0 || v[0] != '{' {
				bad(fmt.Sprintf("inputResponses[%q] must be a result object", k))
				return
			}
		}
	} else if p.responses != nil {
		bad("inputResponses must be an object, not null")
		return
	}
	own := owner(r)
	im.mu.Lock()
	c := im.states[p.state]
	if c == nil || subtle.ConstantTimeCompare(c.owner[:], own[:]) != 1 || c.method != m.method || c.target != p.target {
		im.mu.Unlock()
		bad("unknown, expired or tampered requestState: it names no call waiting for input from this client with this method and " + targetWord(m.method))
		return
	}
	delete(im.states, p.state) // a state is good for one follow-up
	c.token = ""
	im.mu.Unlock()
	rd := newRound(rawID(m.id), responses)
	select {
	case c.join <- rd:
	case <-c.done:
		bad("expired requestState: the call no longer waits for input")
		return
	}
	im.wait(w, r, c.s, rd, sse)
}

func targetWord(method string) string {
	switch method {
	case "resources/read":
		return "uri"
	}
	return "name"
}

// wait writes what the call sends to this round's POST until its last
// message, or until the client leaves. The POST counts as in flight for
// Shutdown's drain, like a relayed one.
func (im *inputManager) wait(w http.ResponseWriter, r *http.Request, s *Session, rd *inputRound, sse bool) {
	im.b.inflight.Add(1)
	defer im.b.inflight.Add(-1)
	defer close(rd.gone)
	out := &responder{w: w, rc: http.NewResponseController(w), st: &stream{sse: sse}, s: s, b: im.b, wrote: make(chan struct{})}
	for {
		select {
		case e := <-rd.ev:
			out.add(e.raw, e.last, e.last)
			if e.last {
				out.finish()
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// fromChild is called by the shared child's stdout reader for every
// message not tied to a request of a stream. It takes the child's requests
// it can attribute to exactly one call whose client can answer them, and
// the child's cancellations of held requests. It must not block; it reports
// whether it took m (else the caller refuses it).
func (im *inputManager) fromChild(s *Session, m message) bool {
	switch m.kind {
	case kindNotification:
		if m.method != "notifications/cancelled" || m.requestID == "" {
			return false
		}
		im.mu.Lock()
		c := im.held[m.requestID]
		im.mu.Unlock()
		if c == nil {
			return false
		}
		select {
		case c.cancels <- m.requestID:
		default:
		}
		return true
	case kindRequest:
	default:
		return false
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(m.raw, &req); err != nil {
		return false
	}
	im.mu.Lock()
	c, n := im.attribute(s)
	if c == nil || !c.caps.allows(m.method) {
		im.mu.Unlock()
		if n > 1 {
			s.log.Warn("server request refused: several stateless calls could have sent it", "method", m.method, "calls", n)
			refuseChild(s, m, fmt.Sprintf("%s is not available: %d stateless calls are in flight and the stdio revision does not say which one asks", m.method, n))
			return true
		}
		return false
	}
	if c.nheld >= maxInputsPerCall || c.heldBytes+len(m.raw) > maxInputBytes {
		im.mu.Unlock()
		s.log.Warn("limit hit", logevent.LimitHit, "limit", "inputs_per_call", "max", maxInputsPerCall, "max_bytes", maxInputBytes)
		refuseChild(s, m, fmt.Sprintf("%s is not available: this call already waits for %d inputs (%d bytes)", m.method, c.nheld, c.heldBytes))
		return true
	}
	h := heldInput{childKey: m.id, childID: req.ID, method: m.method, params: req.Params, size: len(m.raw)}
	select {
	case c.reqs <- h:
		c.nheld++
		c.heldBytes += h.size
		im.held[m.id] = c
		im.mu.Unlock()
	default:
		im.mu.Unlock()
		refuseChild(s, m, m.method+" is not available: too many inputs pending for this call")
	}
	return true
}

// attribute picks the call a request of the shared child s belongs to: the
// only call of an input method that a POST waits on (counting those served
// the plain way), or, if no POST waits on any, the only call held for a
// follow-up. It returns nil and the number of candidates when there is no
// single one. im.mu must be held.
func (im *inputManager) attribute(s *Session) (*inputCall, int) {
	var run, held *inputCall
	nrun, nheld := im.plain, 0
	for _, c := range im.calls {
		if c.s != s {
			continue
		}
		if c.running {
			run = c
			nrun++
		} else {
			held = c
			nheld++
		}
	}
	switch {
	case nrun == 1 && run != nil:
		return run, 1
	case nrun > 0:
		return nil, nrun
	case nheld == 1:
		return held, 1
	}
	return nil, nheld
}

// refuseChild answers a request of the child with an error.
func refuseChild(s *Session, m message, msg string) {
	if err := s.write(errorResponseID(rawID(m.id), codeMethodNotFound, msg, nil)); err != nil {
		s.log.Debug("refuse server request", "err", err)
	}
}

// run drives one call: rd is the POST that started it.
func (c *inputCall) run(rd *inputRound) {
	r := c.newCallRun(rd)
	defer r.stopTimers()
	defer func() { c.finish(r.held, r.reason) }()
	for r.step() {
	}
}

// callRun is the state of inputCall.run, owned by its goroutine: the POST
// the call answers now, the child's requests held for the client, and the
// call's timers.
type callRun struct {
	c      *inputCall
	cur    *inputRound // the POST waiting on the call; nil while it is held
	held   []heldInput
	final  []byte // the child's answer, come while no POST waited
	serial int    // numbers the inputRequests keys
	reason string // why the call ends early; finish cancels it in the child

	gatherFor   time.Duration
	ttl         time.Duration
	callTimeout time.Duration
	idle        *time.Timer // a waiting POST heard nothing for callTimeout
	gather      *time.Timer // the wait for more requests of the child before asking
	gathering   bool
	expiry      *time.Timer // the client's follow-up is overdue (ttl)
}

// newCallRun reads the call's bounds and starts its idle timer; the gather
// and expiry timers start stopped.
func (c *inputCall) newCallRun(rd *inputRound) *callRun {
	im := c.im
	im.mu.Lock()
	gatherFor, ttl := im.gather, im.ttl
	im.mu.Unlock()
	callTimeout := im.b.opts.CallTimeout
	if callTimeout <= 0 {
		callTimeout = 5 * time.Minute
	}
	r := &callRun{
		c: c, cur: rd, gatherFor: gatherFor, ttl: ttl, callTimeout: callTimeout,
		idle: time.NewTimer(callTimeout), gather: time.NewTimer(time.Hour), expiry: time.NewTimer(time.Hour),
	}
	r.gather.Stop()
	r.expiry.Stop()
	return r
}

// stopTimers stops the call's timers when run returns.
func (r *callRun) stopTimers() {
	r.expiry.Stop()
	r.gather.Stop()
	r.idle.Stop()
}

// step waits for the next event of the call and handles it. It reports
// whether the call goes on.
func (r *callRun) step() bool {
	c, s := r.c, r.c.s
	var gone <-chan struct{}
	if r.cur != nil {
		gone = r.cur.gone
	}
	select {
	case it := <-c.st.ch:
		return r.childMessage(it)
	case h := <-c.reqs:
		r.hold(h)
	case id := <-c.cancels:
		r.cancelHeld(id)
	case <-r.gather.C:
		r.gathering = false
		if r.cur != nil && len(r.held) > 0 && !r.ask() {
			r.reason = "client disconnected"
			return false
		}
	case nr := <-c.join:
		return r.join(nr)
	case <-gone:
		r.reason = "client disconnected"
		return false
	case <-r.idle.C:
		return r.idleTimeout()
	case <-r.expiry.C:
		r.reason = fmt.Sprintf("soda-mcpd: the client did not send the input within %s", r.ttl)
		s.log.Info("input request expired", "after", r.ttl.String(), "inputs", len(r.held))
		return false
	case <-s.dead:
		if r.cur != nil {
			r.send(errorResponseID(r.cur.id, codeServerGone, s.goneMessage(), nil), true)
		}
		return false
	}
	return true
}

// childMessage passes a message of the child for the call on to the
// waiting POST. The call's answer ends the call, or, while the call is
// held, is kept for the follow-up. It reports whether the call goes on.
func (r *callRun) childMessage(it item) bool {
	if it.respID == r.c.key {
		if r.cur == nil {
			r.final = it.raw
			return true
		}
		r.send(completeResponse(it.raw, r.cur.id, r.c.method), true)
		return false
	}
	if r.cur != nil && it.raw != nil {
		r.send(it.raw, false)
		r.idle.Reset(r.callTimeout)
	}
	return true
}

// hold keeps a request of the child for the client and, if a POST waits,
// starts gathering the requests that come with it before asking.
func (r *callRun) hold(h heldInput) {
	r.serial++
	h.key = "input-" + strconv.Itoa(r.serial)
	r.held = append(r.held, h)
	if r.cur != nil && !r.gathering {
		r.gathering = true
		r.gather.Reset(r.gatherFor)
	}
}

// cancelHeld forgets the held request the child cancelled.
func (r *callRun) cancelHeld(childKey string) {
	for i := range r.held {
		if r.held[i].childKey == childKey {
			r.unhold(i)
			break
		}
	}
}

// join takes the client's follow-up nr: the call runs again, the child's
// held requests get the client's responses, and those left without one
// are asked again. It reports whether the call goes on.
func (r *callRun) join(nr *inputRound) bool {
	c := r.c
	r.expiry.Stop()
	c.im.mu.Lock()
	c.running = true
	c.im.mu.Unlock()
	r.cur = nr
	r.idle.Reset(r.callTimeout)
	if r.final != nil {
		r.send(completeResponse(r.final, r.cur.id, c.method), true)
		return false
	}
	r.answerHeld(nr.responses)
	if len(r.held) > 0 && !r.ask() { // responses missing: ask again for the rest
		r.reason = "client disconnected"
		return false
	}
	return true
}

// answerHeld writes the client's responses to the child as the answers to
// its held requests, and forgets those requests.
func (r *callRun) answerHeld(responses map[string]json.RawMessage) {
	s := r.c.s
	for i := 0; i < len(r.held); {
		resp, ok := responses[r.held[i].key]
		if !ok {
			i++
			continue
		}
		msg := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, r.held[i].childID, compactLine(resp))
		if err := s.write(msg); err != nil {
			s.end("MCP server stopped reading its input: " + err.Error())
		}
		r.unhold(i)
	}
}

// idleTimeout fails the waiting POST when the child sent nothing for the
// call within the call timeout. It reports whether the call goes on, which
// it does when no POST waits.
func (r *callRun) idleTimeout() bool {
	if r.cur == nil {
		return true
	}
	s := r.c.s
	r.reason = fmt.Sprintf("soda-mcpd: no answer within %s", r.callTimeout)
	r.c.im.b.log.Warn("limit hit", logevent.LimitHit, "limit", "call_timeout", "timeout", r.callTimeout.String(), "session", s.ID[:8], "requests", 1)
	r.send(errorResponseID(r.cur.id, codeTimeout, fmt.Sprintf("the MCP server did not answer within %s; the request was cancelled", r.callTimeout), nil), true)
	return false
}

// unhold forgets the held request i.
func (r *callRun) unhold(i int) {
	im, c := r.c.im, r.c
	h := r.held[i]
	r.held = append(r.held[:i], r.held[i+1:]...)
	im.mu.Lock()
	delete(im.held, h.childKey)
	c.nheld--
	c.heldBytes -= h.size
	im.mu.Unlock()
}

// send gives raw to the current POST; it reports false if the POST is gone.
func (r *callRun) send(raw []byte, last bool) bool {
	select {
	case r.cur.ev <- roundEvent{raw: raw, last: last}:
		return true
	case <-r.cur.gone:
		return false
	}
}

// ask answers the current POST with the held requests and a new state
// and holds the call. If too many calls are held, the child's requests
// are refused instead and the POST goes on waiting for the result.
// It reports false if the POST is gone.
func (r *callRun) ask() bool {
	c, im := r.c, r.c.im
	token := rand.Text()
	im.mu.Lock()
	if len(im.states) >= im.maxCalls {
		limit := im.maxCalls
		im.mu.Unlock()
		r.refuseHeld(limit)
		return true
	}
	im.states[token] = c
	c.token = token
	c.running = false
	im.mu.Unlock()
	ok := r.send(inputRequiredResponse(r.cur.id, r.held, token), true)
	r.cur = nil
	r.idle.Stop()
	r.expiry.Reset(r.ttl)
	return ok
}

// refuseHeld answers every held request of the child with an error, as
// limit calls already wait for input, and forgets them.
func (r *callRun) refuseHeld(limit int) {
	s := r.c.s
	r.c.im.b.log.Warn("limit hit", logevent.LimitHit, "limit", "input_calls", "max", limit)
	for len(r.held) > 0 {
		msg := fmt.Sprintf("%s is not available: %d stateless calls already wait for input", r.held[0].method, limit)
		if err := s.write(errorResponseID(r.held[0].childID, codeMethodNotFound, msg, nil)); err != nil {
			s.log.Debug("refuse server request", "err", err)
		}
		r.unhold(0)
	}
}

// finish frees the call: the child's requests still held are answered with
// an error, and the call is cancelled in the child when reason is set.
func (c *inputCall) finish(held []heldInput, reason string) {
	im, s := c.im, c.s
	im.mu.Lock()
	delete(im.calls, c.key)
	if c.token != "" {
		delete(im.states, c.token)
		c.token = ""
	}
	for _, h := range held {
		delete(im.held, h.childKey)
	}
	im.mu.Unlock()
	close(c.done)
	// The call is cancelled in the child first, then its held requests
	// fail: the child learns that the call is over before it could answer
	// the failure with a result nobody waits for.
	s.detach(c.st, reason)
	if !s.isEnded() {
		msg := reason
		if msg == "" {
			msg = "soda-mcpd: the call ended"
		}
		for _, h := range held {
			if err := s.write(errorResponseID(h.childID, codeTimeout, msg, nil)); err != nil {
				s.log.Debug("answer held request", "err", err)
			}
		}
	}
	s.done()
}

// inputRequiredResponse is the InputRequiredResult listing held.
func inputRequiredResponse(id json.RawMessage, held []heldInput, token string) []byte {
	reqs := make(map[string]any, len(held))
	for _, h := range held {
		r := map[string]any{"method": h.method}
		if len(h.params) > 0 && !bytes.Equal(h.params, []byte("null")) {
			r["params"] = h.params
		}
		reqs[h.key] = r
	}
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"result": map[string]any{
			"resultType":    "input_required",
			"inputRequests": reqs,
			"requestState":  token,
		},
	})
	return b
}

// completeResponse is the child's final answer with the client's id of the
// POST it goes to, translated as every stateless answer is (completeResult:
// resultType, and the caching hints of a cacheable method).
func completeResponse(raw []byte, id json.RawMessage, method string) []byte {
	return rewriteID(completeResult(raw, method), id)
}
