package top

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// families gathers a histogram that observed obs.
func families(t *testing.T, obs []float64) Families {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "soda_mcp_call_duration_seconds", Buckets: []float64{.01, .1, 1}})
	reg.MustRegister(h)
	for _, o := range obs {
		h.Observe(o)
	}
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	f := Families{}
	for _, m := range got {
		f[m.GetName()] = m
	}
	return f
}

func TestQuantile(t *testing.T) {
	// 100 observations: 90 in (0, .01], 9 in (.01, .1], 1 in (.1, 1].
	var obs []float64
	for i := range 100 {
		switch {
		case i < 90:
			obs = append(obs, .005)
		case i < 99:
			obs = append(obs, .05)
		default:
			obs = append(obs, .5)
		}
	}
	cur := families(t, obs)
	if q := Quantile(.5, nil, cur, "soda_mcp_call_duration_seconds"); math.Abs(q-.01*50/90) > 1e-9 {
		t.Errorf("p50 = %v, want %v (interpolated in the first bucket)", q, .01*50/90)
	}
	if q := Quantile(.99, nil, cur, "soda_mcp_call_duration_seconds"); math.Abs(q-.1) > 1e-9 {
		t.Errorf("p99 = %v, want .1 (the 99th falls at the top of the second bucket)", q)
	}
	// Between two samples only the new observations count.
	prev := families(t, obs[:90])
	if q := Quantile(.5, prev, cur, "soda_mcp_call_duration_seconds"); q <= .01 || q > .1 {
		t.Errorf("p50 of the last 10 = %v, want in (.01, .1]", q)
	}
	if q := Quantile(.99, cur, cur, "soda_mcp_call_duration_seconds"); !math.IsNaN(q) {
		t.Errorf("no new observations: %v, want NaN", q)
	}
}

func TestRenderWidth(t *testing.T) {
	rows := []Row{{Name: strings.Repeat("a-very-long-server-name", 3), MCP: true, Sessions: 12345678, Children: 8, CallsPerSec: 123456.7, P99: 2.5, Refused: 99999999, CallsTotal: 1e11},
		{Name: "gone", Err: strings.Repeat("cannot read its token ", 10)},
		{Name: "sodad", HasSandboxes: true, Sandboxes: 3, EgressAllowed: 1e9, EgressDenied: 1e9},
		{Name: "soda-validate@shellcheck-and-more", Validator: true, Valid: 1e9, Invalid: 1e9, NoVerdict: 1e9, Busy: 1e9, CleanupFailures: 1}}
	var b strings.Builder
	Render(&b, rows, time.Now(), 2*time.Second)
	if !strings.Contains(b.String(), "VALIDATOR") {
		t.Errorf("no validator section:\n%s", b.String())
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
}
