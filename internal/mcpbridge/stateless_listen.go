package mcpbridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/logevent"
)

// subscriptions/listen (SEP-2575) for stateless clients. The revision
// replaces the GET stream and resources/subscribe with one long-lived
// request whose response is an SSE stream: first
// notifications/subscriptions/acknowledged, then the notifications the
// client opted in to, each tagged with the subscription's id (the listen
// request's JSON-RPC id). The shared child, of an older revision, sends its
// list_changed and resources/updated notifications to whoever is connected;
// the bridge fans them out to the open listen streams that asked for them,
// and turns resourceSubscriptions into resources/subscribe (and, when the
// last listener of a URI leaves, resources/unsubscribe) to the child.

// listenFilter is the SubscriptionFilter of a listen request, and the
// subset of it the bridge agrees to in the acknowledgement.
type listenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// listener is one open subscriptions/listen stream.
type listener struct {
	id     json.RawMessage // the listen request's id: the subscription id
	filter listenFilter
	ch     chan []byte
}

// listenerBuffer bounds notifications queued for one listen stream; a
// client that reads slower than the child notifies loses the excess (and
// the log says so) rather than stall the child's output for everyone.
const listenerBuffer = 64

// listenHub holds the listen streams of the shared child.
type listenHub struct {
	s *Session

	mu      sync.Mutex
	subs    map[*listener]struct{}
	uriRefs map[string]int // resource URI → listeners subscribed to it
	next    int64
}

func newListenHub(s *Session) *listenHub {
	return &listenHub{s: s, subs: map[*listener]struct{}{}, uriRefs: map[string]int{}}
}

// add registers l and subscribes the child to the URIs nobody listened to
// yet.
func (h *listenHub) add(l *listener) {
	h.mu.Lock()
	var fresh []string
	for _, u := range l.filter.ResourceSubscriptions {
		if h.uriRefs[u] == 0 {
			fresh = append(fresh, u)
		}
		h.uriRefs[u]++
	}
	h.subs[l] = struct{}{}
	h.mu.Unlock()
	for _, u := range fresh {
		h.tellChild("resources/subscribe", u)
	}
}

// remove unregisters l and unsubscribes the child from the URIs nobody
// listens to any more.
func (h *listenHub) remove(l *listener) {
	h.mu.Lock()
	delete(h.subs, l)
	var gone []string
	for _, u := range l.filter.ResourceSubscriptions {
		if h.uriRefs[u]--; h.uriRefs[u] <= 0 {
			delete(h.uriRefs, u)
			gone = append(gone, u)
		}
	}
	h.mu.Unlock()
	for _, u := range gone {
		h.tellChild("resources/unsubscribe", u)
	}
}

// tellChild sends a resources/(un)subscribe request to the child. Its
// answer is not awaited: the reader drops answers nobody waits for, and a
// child that refuses simply sends no updates.
func (h *listenHub) tellChild(method, uri string) {
	h.mu.Lock()
	h.next++
	id := "soda-listen-" + strconv.FormatInt(h.next, 10)
	h.mu.Unlock()
	msg := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"method":%q,"params":{"uri":%s}}`, id, method, strconv.Quote(uri))
	if err := h.s.write(msg); err != nil {
		h.s.log.Debug("subscriptions/listen: tell the MCP server", "method", method, "err", err)
	}
}

// publish hands a notification of the child to every listen stream that
// asked for its kind. Other notifications (logging, say) have no stateless
// destination and are dropped.
func (h *listenHub) publish(m message) {
	var uri string
	if m.method == "notifications/resources/updated" {
		var p struct {
			Params struct {
				URI string `json:"uri"`
			} `json:"params"`
		}
		_ = json.Unmarshal(m.raw, &p)
		uri = p.Params.URI
	}
	h.mu.Lock()
	var to []*listener
	for l := range h.subs {
		if l.filter.wants(m.method, uri) {
			to = append(to, l)
		}
	}
	h.mu.Unlock()
	if len(to) == 0 {
		h.s.log.Debug("notification from the stateless child dropped", "method", m.method)
		return
	}
	for _, l := range to {
		select {
		case l.ch <- tagSubscription(m.raw, l.id):
		default:
			h.s.log.Warn("limit hit", logevent.LimitHit, "limit", "listen_buffer", "method", m.method, "subscription", string(l.id))
		}
	}
}

// wants reports whether the filter asks for a notification.
func (f *listenFilter) wants(method, uri string) bool {
	switch method {
	case "notifications/tools/list_changed":
		return f.ToolsListChanged
	case "notifications/prompts/list_changed":
		return f.PromptsListChanged
	case "notifications/resources/list_changed":
		return f.ResourcesListChanged
	case "notifications/resources/updated":
		for _, u := range f.ResourceSubscriptions {
			// The URI may be a sub-resource of the one subscribed to.
			if uri == u || strings.HasPrefix(uri, strings.TrimSuffix(u, "/")+"/") {
				return true
			}
		}
	}
	return false
}

// agreed is the part of f the child can honour, judged from its
// capabilities (the initialize result).
func (f listenFilter) agreed(init json.RawMessage) listenFilter {
	var caps struct {
		Capabilities struct {
			Tools *struct {
				ListChanged bool `json:"listChanged"`
			} `json:"tools"`
			Prompts *struct {
				ListChanged bool `json:"listChanged"`
			} `json:"prompts"`
			Resources *struct {
				ListChanged bool `json:"listChanged"`
				Subscribe   bool `json:"subscribe"`
			} `json:"resources"`
		} `json:"capabilities"`
	}
	_ = json.Unmarshal(init, &caps)
	c := caps.Capabilities
	out := listenFilter{
		ToolsListChanged:     f.ToolsListChanged && c.Tools != nil && c.Tools.ListChanged,
		PromptsListChanged:   f.PromptsListChanged && c.Prompts != nil && c.Prompts.ListChanged,
		ResourcesListChanged: f.ResourcesListChanged && c.Resources != nil && c.Resources.ListChanged,
	}
	if c.Resources != nil && c.Resources.Subscribe {
		seen := map[string]bool{}
		for _, u := range f.ResourceSubscriptions {
			if u != "" && !seen[u] {
				seen[u] = true
				out.ResourceSubscriptions = append(out.ResourceSubscriptions, u)
			}
		}
	}
	return out
}

// tagSubscription adds params._meta[subscriptionId] to a notification.
func tagSubscription(raw []byte, id json.RawMessage) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(raw, &msg) != nil {
		return raw
	}
	var params map[string]json.RawMessage
	if p, ok := msg["params"]; ok {
		if json.Unmarshal(p, &params) != nil {
			return raw
		}
	}
	if params == nil {
		params = map[string]json.RawMessage{}
	}
	var meta map[string]json.RawMessage
	if mr, ok := params["_meta"]; ok {
		_ = json.Unmarshal(mr, &meta)
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[metaSubscriptionID] = id
	var err error
	if params["_meta"], err = marshalJSON(meta); err != nil {
		return raw
	}
	if msg["params"], err = marshalJSON(params); err != nil {
		return raw
	}
	out, err := marshalJSON(msg)
	if err != nil {
		return raw
	}
	return out
}

// serveListen serves a subscriptions/listen request on the shared child s:
// an SSE stream with the acknowledgement first, then the notifications
// asked for, until the client leaves or the child ends (then the
// SubscriptionsListenResult closes the stream).
func (b *Bridge) serveListen(w http.ResponseWriter, r *http.Request, s *Session, init json.RawMessage, m message) {
	id := rawID(m.id)
	if !accepts(r, "text/event-stream") {
		httpError(w, http.StatusNotAcceptable, m.id, codeInvalidRequest, "subscriptions/listen answers with a stream: Accept must include text/event-stream")
		return
	}
	var p struct {
		Params struct {
			Notifications *listenFilter `json:"notifications"`
		} `json:"params"`
	}
	if err := json.Unmarshal(m.raw, &p); err != nil {
		httpError(w, http.StatusBadRequest, m.id, codeInvalidParams, "invalid params: "+err.Error())
		return
	}
	want := listenFilter{}
	if p.Params.Notifications != nil {
		want = *p.Params.Notifications
	}
	if !s.begin() { // an open stream keeps the shared child from idling out
		httpError(w, http.StatusBadGateway, m.id, codeServerGone, "the MCP server ended: "+s.goneMessage())
		return
	}
	defer s.done()
	l := &listener{id: id, filter: want.agreed(init), ch: make(chan []byte, listenerBuffer)}
	s.listeners.add(l)
	defer s.listeners.remove(l)

	ack, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"method":  "notifications/subscriptions/acknowledged",
		"params": map[string]any{
			"_meta":         map[string]json.RawMessage{metaSubscriptionID: id},
			"notifications": l.filter,
		},
	})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	writeEvent(w, "message", ack)
	if err := rc.Flush(); err != nil {
		return
	}
	s.log.Debug("subscriptions/listen open", "subscription", string(id), "filter", fmt.Sprintf("%+v", l.filter))
	keepalive := time.NewTicker(25 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case raw := <-l.ch:
			writeEvent(w, "message", raw)
			if len(l.ch) == 0 {
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
			end, _ := json.Marshal(map[string]any{
				"jsonrpc": "2.0",
				"id":      id,
				"result": map[string]any{
					"resultType": "complete",
					"_meta":      map[string]json.RawMessage{metaSubscriptionID: id},
				},
			})
			writeEvent(w, "message", end)
			rc.Flush()
			return
		case <-r.Context().Done():
			return
		}
	}
}
