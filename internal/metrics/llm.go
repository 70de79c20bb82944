package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// LLM records what the model gateways of a daemon's sandboxes did: tokens
// by provider and kind, requests by provider and status class, upstream
// errors by provider. It implements llmgateway.Metrics.
type LLM struct {
	tokens   *prometheus.CounterVec
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
}

// NewLLM registers the model gateway metrics in r (nil r: nil, off).
func NewLLM(r *Registry) *LLM {
	if r == nil {
		return nil
	}
	l := &LLM{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "llm_tokens_total",
			Help: "Tokens the model providers reported for sandboxes' requests, by provider and kind (input, output, cache_read, cache_write)."}, []string{"provider", "kind"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "llm_requests_total",
			Help: "Requests through the model gateways, by provider and status class (2xx, 4xx, 5xx; refused ones included)."}, []string{"provider", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "llm_upstream_errors_total",
			Help: "Requests the model gateways could not forward (the upstream unreachable, its certificate refused, no answer), by provider."}, []string{"provider"}),
	}
	r.reg.MustRegister(l.tokens, l.requests, l.errors)
	return l
}

// Request counts a request of provider answered with status.
func (l *LLM) Request(provider string, status int) {
	if l == nil {
		return
	}
	l.requests.WithLabelValues(provider, strconv.Itoa(status/100)+"xx").Inc()
}

// Tokens counts n tokens of kind for provider.
func (l *LLM) Tokens(provider, kind string, n int64) {
	if l == nil || n <= 0 {
		return
	}
	l.tokens.WithLabelValues(provider, kind).Add(float64(n))
}

// UpstreamError counts a request of provider that could not be forwarded.
func (l *LLM) UpstreamError(provider string) {
	if l == nil {
		return
	}
	l.errors.WithLabelValues(provider).Inc()
}
