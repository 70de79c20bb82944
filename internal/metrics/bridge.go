package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bridge records one soda-mcpd's bridge: its sessions, children, calls
// and bytes, and (HTTP) its listener's refusals and limits.
type Bridge struct {
	http            *HTTP
	sessionsOpened  prometheus.Counter
	sessionsEnded   *prometheus.CounterVec
	sessionsRefused *prometheus.CounterVec
	childrenStarted prometheus.Counter
	childrenExited  *prometheus.CounterVec
	calls           *prometheus.CounterVec
	callSeconds     *prometheus.HistogramVec
	bytes           *prometheus.CounterVec
}

// Live is what the bridge holds now, read at each scrape.
type Live func() (sessions, children int)

// NewBridge registers the bridge metrics of server in r; live gives the
// gauges.
func NewBridge(r *Registry, server string, live Live) *Bridge {
	if r == nil {
		return nil
	}
	cl := prometheus.Labels{"server": server}
	f := factory{r.reg, cl}
	b := &Bridge{
		http:            newHTTP(f),
		sessionsOpened:  f.counter("mcp_sessions_opened_total", "Client sessions opened (each with its own child)."),
		sessionsEnded:   f.counterVec("mcp_sessions_ended_total", "Client sessions ended, by reason: client (DELETE), idle, evicted, child_exit, shutdown, other.", "reason"),
		sessionsRefused: f.counterVec("mcp_sessions_refused_total", "Sessions refused, by reason: busy (MaxSessions), draining, child_start (the server did not start), protocol (no initialize, unknown version).", "reason"),
		childrenStarted: f.counter("mcp_children_started_total", "Server children started."),
		childrenExited:  f.counterVec("mcp_children_exited_total", "Server children gone, by cause: exited (status 0), failed (another status), terminated (SIGTERM at teardown), killed (SIGKILL at teardown, or by the kernel), signal (another signal).", "cause"),
		calls:           f.counterVec("mcp_calls_total", "JSON-RPC requests relayed, by method class.", "class"),
		callSeconds:     f.histogramVec("mcp_call_duration_seconds", "Time from a POST's arrival to its last response, by the method class of its first request.", "class"),
		bytes:           f.counterVec("mcp_relayed_bytes_total", "Bytes relayed: in (client to server), out (server to client).", "direction"),
	}
	f.gaugeFunc("mcp_sessions", "Client sessions open now.", func() float64 { s, _ := live(); return float64(s) })
	f.gaugeFunc("mcp_children", "Server children running now.", func() float64 { _, c := live(); return float64(c) })
	return b
}

// HTTP is the listener's part (refusals, limits), nil with metrics off.
func (b *Bridge) HTTP() *HTTP {
	if b == nil {
		return nil
	}
	return b.http
}

// SessionOpened counts a session and its child.
func (b *Bridge) SessionOpened() {
	if b != nil {
		b.sessionsOpened.Inc()
		b.childrenStarted.Inc()
	}
}

// ChildStarted counts a child started without a session (the stateless
// shared child, a health probe).
func (b *Bridge) ChildStarted() {
	if b != nil {
		b.childrenStarted.Inc()
	}
}

// SessionEnded counts an ended session by one of its fixed reasons.
func (b *Bridge) SessionEnded(reason string) {
	if b != nil {
		b.sessionsEnded.WithLabelValues(reason).Inc()
	}
}

// SessionRefused counts a refused session by reason.
func (b *Bridge) SessionRefused(reason string) {
	if b != nil {
		b.sessionsRefused.WithLabelValues(reason).Inc()
	}
}

// ChildExited counts a child gone, its cause from its exit status as
// os/exec words it ("exit status 0", "signal: killed").
func (b *Bridge) ChildExited(status string) {
	if b != nil {
		b.childrenExited.WithLabelValues(ExitCause(status)).Inc()
	}
}

// Calls counts n requests of JSON-RPC method, by its MethodClass.
func (b *Bridge) Calls(method string, n int) {
	if b != nil && n > 0 {
		b.calls.WithLabelValues(MethodClass(method)).Add(float64(n))
	}
}

// CallDone observes a POST's duration, by the MethodClass of its first
// request's method.
func (b *Bridge) CallDone(method string, d time.Duration) {
	if b != nil {
		b.callSeconds.WithLabelValues(MethodClass(method)).Observe(d.Seconds())
	}
}

// LimitHit counts a limit of the bridge's listener that was hit (see
// HTTP.LimitHit).
func (b *Bridge) LimitHit(limit string) { b.HTTP().LimitHit(limit) }

// Relayed counts bytes in (to the server) and out (to the client).
func (b *Bridge) Relayed(in, out int) {
	if b == nil {
		return
	}
	if in > 0 {
		b.bytes.WithLabelValues("in").Add(float64(in))
	}
	if out > 0 {
		b.bytes.WithLabelValues("out").Add(float64(out))
	}
}

// ExitCause is the cause label of a child's exit status.
func ExitCause(status string) string {
	switch {
	case status == "exit status 0":
		return "exited"
	case strings.HasPrefix(status, "exit status"):
		return "failed"
	case status == "signal: terminated":
		return "terminated"
	case status == "signal: killed":
		return "killed"
	default:
		return "signal"
	}
}

// MethodClass is the class label of a JSON-RPC method: the methods MCP
// defines by name, their families, and "other" for anything a client
// made up (so that no client can add a series).
func MethodClass(method string) string {
	switch method {
	case "initialize", "ping", "tools/call", "tools/list":
		return method
	}
	for _, p := range []string{"resources/", "prompts/", "completion/", "logging/", "tasks/", "notifications/"} {
		if strings.HasPrefix(method, p) {
			return strings.TrimSuffix(p, "/")
		}
	}
	return "other"
}

// HTTP records a loopback listener's refusals and limit hits.
type HTTP struct {
	refused *prometheus.CounterVec
	limits  *prometheus.CounterVec
}

func newHTTP(f factory) *HTTP {
	return &HTTP{
		refused: f.counterVec("http_refused_total", "Requests refused before they reached the server, by reason: auth (missing or wrong token), host, origin (DNS rebinding protection).", "reason"),
		limits:  f.counterVec("limit_hits_total", "Limits hit, by limit: connections (the listener's bound), headers, body, call_timeout, sessions.", "limit"),
	}
}

// NewHTTP registers the listener metrics of server alone (a daemon
// without a bridge: soda-validated).
func NewHTTP(r *Registry, server string) *HTTP {
	if r == nil {
		return nil
	}
	return newHTTP(factory{r.reg, prometheus.Labels{"server": server}})
}

// Refused counts a refused request.
func (h *HTTP) Refused(reason string) {
	if h != nil {
		h.refused.WithLabelValues(reason).Inc()
	}
}

// LimitHit counts a limit hit.
func (h *HTTP) LimitHit(limit string) {
	if h != nil {
		h.limits.WithLabelValues(limit).Inc()
	}
}

// factory registers metrics with constant labels.
type factory struct {
	reg *prometheus.Registry
	cl  prometheus.Labels
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.cl})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help, label string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.cl}, []string{label})
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogramVec(name, help, label string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.cl, Buckets: durationBuckets}, []string{label})
	f.reg.MustRegister(h)
	return h
}

func (f factory) gaugeFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.cl}, fn))
}
