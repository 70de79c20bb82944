// Package top is sodactl top: it samples the Prometheus metrics of every
// soda daemon on the host (each soda-mcpd's GET /metrics with its token,
// found by its runtime record; the textfiles under /run/soda/metrics,
// sodad's among them), parses them with the Prometheus text parser, and
// renders one screen of 80 columns: per MCP server its sessions, calls
// per second, p99 latency and refusals; the sandboxes and their egress.
// Rates and the p99 are over the interval between two samples.
package top

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TextfileDir is where soda's daemons write their textfiles when asked to
// (internal/metrics), and where sodactl top reads them (TextfileSources).
const TextfileDir = "/run/soda/metrics"

// Source is one daemon to sample.
type Source struct {
	// Name is what the screen calls it (jira, sodad).
	Name string
	// URL and Token reach a daemon's GET /metrics; File is a textfile
	// instead.
	URL, Token, File string
	// Err says why the source cannot be read (no access to its token).
	Err error
}

// Families are one sample of a source, by metric name.
type Families map[string]*dto.MetricFamily

// Sample is every source read once.
type Sample struct {
	Time    time.Time
	Sources []Source
	Fams    []Families // by source; nil where reading failed
	Errs    []error
}

// Read samples every source.
func Read(ctx context.Context, c *http.Client, sources []Source) Sample {
	s := Sample{Time: time.Now(), Sources: sources, Fams: make([]Families, len(sources)), Errs: make([]error, len(sources))}
	for i, src := range sources {
		s.Fams[i], s.Errs[i] = read(ctx, c, src)
	}
	return s
}

func read(ctx context.Context, c *http.Client, src Source) (Families, error) {
	if src.Err != nil {
		return nil, src.Err
	}
	var r io.Reader
	if src.File != "" {
		f, err := os.Open(src.File)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src.URL, nil)
		if err != nil {
			return nil, err
		}
		if src.Token != "" {
			req.Header.Set("Authorization", "Bearer "+src.Token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", src.URL, resp.Status)
		}
		r = resp.Body
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// TextfileSources are the .prom files in dir, named by their base names.
func TextfileSources(dir string) []Source {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.prom"))
	sort.Strings(paths)
	var out []Source
	for _, p := range paths {
		out = append(out, Source{Name: strings.TrimSuffix(filepath.Base(p), ".prom"), File: p})
	}
	return out
}

// Sum is the total of a counter or gauge family, every series, the
// series whose label name has value when name is set.
func (f Families) Sum(metric, label, value string) float64 {
	var t float64
	for _, m := range f[metric].GetMetric() {
		if label != "" && labelOf(m, label) != value {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			t += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			t += m.GetGauge().GetValue()
		}
	}
	return t
}

// Has says whether the family is there.
func (f Families) Has(metric string) bool { return f[metric] != nil }

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// buckets merges a histogram family's series: upper bound to cumulative
// count, and the total count.
func (f Families) buckets(metric string) (map[float64]uint64, uint64) {
	b := map[float64]uint64{}
	var n uint64
	for _, m := range f[metric].GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		n += h.GetSampleCount()
		for _, bk := range h.GetBucket() {
			b[bk.GetUpperBound()] += bk.GetCumulativeCount()
		}
	}
	return b, n
}

// Quantile is the q-quantile of the observations of a histogram family
// between two samples (prev may be nil: since start), interpolated
// linearly inside a bucket as Prometheus's histogram_quantile does; NaN
// when nothing was observed.
func Quantile(q float64, prev, cur Families, metric string) float64 {
	cb, cn := cur.buckets(metric)
	var pb map[float64]uint64
	var pn uint64
	if prev != nil {
		pb, pn = prev.buckets(metric)
	}
	n := cn - pn
	if cn < pn || n == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(cb))
	for ub := range cb {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	rank := q * float64(n)
	lower, below := 0.0, uint64(0)
	for _, ub := range bounds {
		c := cb[ub] - pb[ub]
		if float64(c) >= rank {
			if math.IsInf(ub, 1) {
				return lower
			}
			inBucket := c - below
			if inBucket == 0 {
				return ub
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(inBucket)
		}
		lower, below = ub, c
	}
	return lower // above every bound: the largest finite one
}

// Row is one MCP server on the screen.
type Row struct {
	Name                        string
	Sessions, Children          float64
	CallsPerSec, P99            float64 // NaN: no calls in the interval
	Refused                     float64 // refusals in the interval
	RefusedTotal, CallsTotal    float64
	Err                         string
	MCP, HasSandboxes           bool // what the source exports
	Validator                   bool
	Valid, Invalid, NoVerdict   float64 // validation calls, totals
	Busy, CleanupFailures       float64
	Sandboxes                   float64
	EgressAllowed, EgressDenied float64 // totals
}

// Rows compares two samples of the same sources (prev may be nil).
func Rows(prev, cur Sample) []Row {
	var rows []Row
	dt := cur.Time.Sub(prev.Time).Seconds()
	for i, src := range cur.Sources {
		r := Row{Name: src.Name, CallsPerSec: math.NaN(), P99: math.NaN()}
		f := cur.Fams[i]
		if f == nil {
			r.Err = errString(cur.Errs[i])
			rows = append(rows, r)
			continue
		}
		var pf Families
		if i < len(prev.Fams) {
			pf = prev.Fams[i]
		}
		r.MCP, r.HasSandboxes = f.Has("soda_mcp_sessions"), f.Has("soda_sandboxes")
		r.Sessions, r.Children = f.Sum("soda_mcp_sessions", "", ""), f.Sum("soda_mcp_children", "", "")
		r.CallsTotal = f.Sum("soda_mcp_calls_total", "", "")
		r.RefusedTotal = f.Sum("soda_http_refused_total", "", "") + f.Sum("soda_mcp_sessions_refused_total", "", "")
		if pf != nil && dt > 0 {
			r.CallsPerSec = (r.CallsTotal - pf.Sum("soda_mcp_calls_total", "", "")) / dt
			r.Refused = r.RefusedTotal - pf.Sum("soda_http_refused_total", "", "") - pf.Sum("soda_mcp_sessions_refused_total", "", "")
			if r.CallsPerSec < 0 || r.Refused < 0 { // the daemon restarted: its counters began again
				r.CallsPerSec, r.Refused = math.NaN(), 0
			}
		}
		r.P99 = Quantile(0.99, pf, f, "soda_mcp_call_duration_seconds")
		r.Validator = f.Has("soda_validate_busy_total")
		r.Valid, r.Invalid = f.Sum("soda_validate_calls_total", "status", "valid"), f.Sum("soda_validate_calls_total", "status", "invalid")
		r.NoVerdict = f.Sum("soda_validate_calls_total", "", "") - r.Valid - r.Invalid
		r.Busy, r.CleanupFailures = f.Sum("soda_validate_busy_total", "", ""), f.Sum("soda_validate_cleanup_failures_total", "", "")
		r.Sandboxes = f.Sum("soda_sandboxes", "", "")
		r.EgressAllowed = f.Sum("soda_sandbox_egress_total", "decision", "allow")
		r.EgressDenied = f.Sum("soda_sandbox_egress_total", "decision", "deny")
		rows = append(rows, r)
	}
	return rows
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Render writes the screen: at most 80 columns.
func Render(w io.Writer, rows []Row, at time.Time, interval time.Duration) {
	fmt.Fprintf(w, "soda top - %s - every %s - q to quit\n\n", at.Format("15:04:05"), interval)
	fmt.Fprintf(w, "%-20s %8s %8s %9s %9s %8s %12s\n", "MCP SERVER", "SESSIONS", "CHILDREN", "CALLS/S", "P99", "REFUSED", "CALLS")
	any := false
	for _, r := range rows {
		if r.Err == "" && !r.MCP {
			continue
		}
		any = true
		if r.Err != "" {
			fmt.Fprintf(w, "%-20s %s\n", cut(r.Name, 20), cut(r.Err, 59))
			continue
		}
		fmt.Fprintf(w, "%-20s %8.0f %8.0f %9s %9s %8.0f %12.0f\n", cut(r.Name, 20), r.Sessions, r.Children, rate(r.CallsPerSec), dur(r.P99), r.Refused, r.CallsTotal)
	}
	if !any {
		fmt.Fprintln(w, "(no soda-mcpd running that this user can read)")
	}
	fmt.Fprintf(w, "\n%-20s %8s %14s %14s\n", "SANDBOXES", "LIVE", "EGRESS ALLOW", "EGRESS DENY")
	anySb := false
	for _, r := range rows {
		if r.Err != "" || !r.HasSandboxes {
			continue
		}
		anySb = true
		fmt.Fprintf(w, "%-20s %8.0f %14.0f %14.0f\n", cut(r.Name, 20), r.Sandboxes, r.EgressAllowed, r.EgressDenied)
	}
	if !anySb {
		fmt.Fprintf(w, "(no sandbox metrics: start sodad with --metrics-textfile)\n")
	}
	first := true
	for _, r := range rows {
		if r.Err != "" || !r.Validator {
			continue
		}
		if first {
			fmt.Fprintf(w, "\n%-24s %8s %8s %10s %8s %9s\n", "VALIDATOR", "VALID", "INVALID", "NO VERDICT", "BUSY", "CLEAN-UP!")
			first = false
		}
		fmt.Fprintf(w, "%-24s %8.0f %8.0f %10.0f %8.0f %9.0f\n", cut(r.Name, 24), r.Valid, r.Invalid, r.NoVerdict, r.Busy, r.CleanupFailures)
	}
}

func rate(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func dur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1000)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
