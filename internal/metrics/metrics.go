// Package metrics defines the Prometheus metrics soda's daemons export
// (soda(7), METRICS), with github.com/prometheus/client_golang: each
// daemon makes its own Registry (no global one), the packages that do the
// work are handed the part they update (Bridge, HTTP, Sandboxes,
// Validator), and Handler serves the registry in the exposition format.
// Every recorder method is safe on a nil receiver, which records nothing:
// that is metrics off.
//
// Label values come from short fixed lists (a method class, a refusal
// reason, an exit cause), never from a client: no session ids, no paths,
// no host names beyond the granted list, so a series count stays bounded.
package metrics

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/soda-project/soda/internal/top"
)

// Namespace prefixes every metric name.
const Namespace = "soda"

// Registry is one daemon's metrics.
type Registry struct {
	reg *prometheus.Registry
}

// NewRegistry returns an empty registry with the Go runtime and process
// collectors, and soda_build_info{daemon,version}.
func NewRegistry(daemon, version string) *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1: the daemon and its version.", ConstLabels: prometheus.Labels{"daemon": daemon, "version": version}})
	info.Set(1)
	reg.MustRegister(info)
	return &Registry{reg: reg}
}

// Gatherer is the registry, for tests and textfile writers.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the metrics in the Prometheus text format (GET /metrics);
// authentication is the caller's (the daemon's listener checks its token).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// WriteTextfile writes the metrics to path for node_exporter's textfile
// collector (--collector.textfile.directory), atomically (a temporary file
// renamed over it), mode 0644.
func (r *Registry) WriteTextfile(path string) error {
	if err := prometheus.WriteToTextfile(path, r.reg); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// TextfileLoop writes the textfile every interval until stop is closed,
// and removes it then (a stale file would show a stopped daemon as live).
func (r *Registry) TextfileLoop(path string, interval time.Duration, stop <-chan struct{}, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer os.Remove(path)
	for {
		if err := r.WriteTextfile(path); err != nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// TextfileInterval is how often the daemons rewrite their textfiles.
const TextfileInterval = 5 * time.Second

// TextfileDir is where the daemons write their textfiles when asked to
// (soda-mcpd --metrics-textfile, sodad --metrics-textfile): point
// node_exporter's --collector.textfile.directory at it.
const TextfileDir = top.TextfileDir

// TextfilePath is daemon NAME's file in dir (.prom, as the collector wants).
func TextfilePath(dir, name string) string {
	return filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".prom")
}

// durationBuckets are the latency histograms' buckets, in seconds: 1 ms
// to 2 min, for MCP calls and sandbox starts alike.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
