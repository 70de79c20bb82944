package metrics

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sandboxes records the sandboxes a daemon runs: how many live, how fast
// they start, what their egress attempts were, which limits they hit.
type Sandboxes struct {
	started      prometheus.Counter
	refused      prometheus.Counter
	startSeconds prometheus.Histogram
	exited       *prometheus.CounterVec
	egress       *prometheus.CounterVec
	limits       *prometheus.CounterVec

	mu     sync.Mutex
	starts map[string]time.Time // live sandboxes, by id: when they started
}

// NewSandboxes registers the sandbox metrics in r.
func NewSandboxes(r *Registry) *Sandboxes {
	if r == nil {
		return nil
	}
	f := factory{r.reg, nil}
	s := &Sandboxes{
		started: f.counter("sandboxes_started_total", "Sandboxes started."),
		refused: f.counter("sandboxes_refused_total", "Sandboxes that did not start (a layer could not be applied, the command was not found)."),
		startSeconds: func() prometheus.Histogram {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "sandbox_start_duration_seconds",
				Help: "Time from a sandbox's start to its command running with every layer in place.", Buckets: durationBuckets})
			r.reg.MustRegister(h)
			return h
		}(),
		exited: f.counterVec("sandboxes_exited_total", "Sandboxes ended, by result: success, exit-code, signal, timeout.", "result"),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "sandbox_egress_total",
			Help: "Egress attempts from sandboxes, by kind (connect, mcp, dns), decision (allow, deny) and reason (the denial's class, empty when allowed)."}, []string{"kind", "decision", "reason"}),
		limits: f.counterVec("sandbox_limit_hits_total", "Sandbox limits hit, by limit: memory (a process killed), tasks (a fork refused), cpu (a period throttled by the CPU quota), timeout.", "limit"),
		starts: map[string]time.Time{},
	}
	r.reg.MustRegister(s.egress)
	f.gaugeFunc("sandboxes", "Sandboxes running now.", func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.starts))
	})
	return s
}

// Started counts sandbox id, started at t.
func (s *Sandboxes) Started(id string, t time.Time) {
	if s == nil {
		return
	}
	s.started.Inc()
	s.mu.Lock()
	s.starts[id] = t
	s.mu.Unlock()
}

// Ready observes sandbox id's start-up, ready at t.
func (s *Sandboxes) Ready(id string, t time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	t0, ok := s.starts[id]
	s.mu.Unlock()
	if ok {
		s.startSeconds.Observe(t.Sub(t0).Seconds())
	}
}

// Refused counts a sandbox that did not start.
func (s *Sandboxes) Refused(id string) {
	if s == nil {
		return
	}
	s.refused.Inc()
	s.mu.Lock()
	delete(s.starts, id)
	s.mu.Unlock()
}

// Exited counts sandbox id's end and the limits it hit: processes the
// memory limit killed, forks the task limit refused, periods the CPU
// quota throttled.
func (s *Sandboxes) Exited(id string, code int, signal string, timedOut bool, memoryKills, tasksRefused, cpuThrottled uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.starts, id)
	s.mu.Unlock()
	result := "success"
	switch {
	case timedOut:
		result = "timeout"
		s.limits.WithLabelValues("timeout").Inc()
	case signal != "":
		result = "signal"
	case code != 0:
		result = "exit-code"
	}
	s.exited.WithLabelValues(result).Inc()
	if memoryKills > 0 {
		s.limits.WithLabelValues("memory").Add(float64(memoryKills))
	}
	if tasksRefused > 0 {
		s.limits.WithLabelValues("tasks").Add(float64(tasksRefused))
	}
	if cpuThrottled > 0 {
		s.limits.WithLabelValues("cpu").Add(float64(cpuThrottled))
	}
}

// Egress counts one egress attempt.
func (s *Sandboxes) Egress(kind, decision, reason string) {
	if s == nil {
		return
	}
	if decision != "deny" {
		reason = ""
	}
	s.egress.WithLabelValues(kind, decision, EgressReason(reason)).Inc()
}

// egressReasons are the classes a denial's reason falls in (the proxy's
// wordings, internal/egress), matched on their words up to any detail (a
// name, an address, an error); the label is the class's name.
var egressReasons = []struct{ match, label string }{
	{"not in allow list", "not_allowed"},
	{"port not granted", "port_not_granted"},
	{"connection limit", "connection_limit"},
	{"dns is not available", "dns"},
	{"resolve ", "resolve"},
	{"own addresses", "resolve"},
	{"dial ", "dial"},
	{"private", "private_address"},
	{"loopback", "private_address"},
	{"method ", "bad_request"},
	{"request", "bad_request"},
	{"protocol version", "bad_request"},
	{"bad target", "bad_request"},
	{"message", "bad_request"},
	{"idle timeout", "idle_timeout"},
}

// EgressReason is the reason label of a denial: one of a short list, or
// "other", never the text itself (it may hold a host name).
func EgressReason(reason string) string {
	if reason == "" {
		return ""
	}
	l := strings.ToLower(reason)
	for _, r := range egressReasons {
		if strings.Contains(l, r.match) {
			return r.label
		}
	}
	return "other"
}
