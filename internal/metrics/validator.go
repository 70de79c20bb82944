package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Validator records a validation worker (soda-validated): its calls by
// status and verdict, how long they took, the calls refused while busy,
// and failed clean-ups.
type Validator struct {
	calls        *prometheus.CounterVec
	callSeconds  prometheus.Histogram
	busy         prometheus.Counter
	cleanupFails prometheus.Counter
}

// NewValidator registers the validation metrics of kind in r.
func NewValidator(r *Registry, kind string) *Validator {
	if r == nil {
		return nil
	}
	f := factory{r.reg, prometheus.Labels{"kind": kind}}
	v := &Validator{
		calls:        f.counterVec("validate_calls_total", "Validation calls that ran, by status: the verdict (valid, invalid) or why there is none (deadline, crashed, malformed-output, failed, cancelled).", "status"),
		busy:         f.counter("validate_busy_total", "Calls refused because another one ran (there is no queue)."),
		cleanupFails: f.counter("validate_cleanup_failures_total", "Sandboxes whose clean-up failed (the worker is then poisoned until restarted)."),
	}
	v.callSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "validate_call_duration_seconds", ConstLabels: f.cl,
		Help: "Time a validation call took, sandbox and clean-up included.", Buckets: durationBuckets})
	r.reg.MustRegister(v.callSeconds)
	return v
}

// Done counts a call that ran, by its verdict's status (a deadline hit is
// status deadline), and its duration.
func (v *Validator) Done(status string, d time.Duration) {
	if v == nil {
		return
	}
	v.calls.WithLabelValues(status).Inc()
	v.callSeconds.Observe(d.Seconds())
}

// Busy counts a call refused because another ran.
func (v *Validator) Busy() {
	if v != nil {
		v.busy.Inc()
	}
}

// CleanupFailed counts a failed clean-up.
func (v *Validator) CleanupFailed() {
	if v != nil {
		v.cleanupFails.Inc()
	}
}
