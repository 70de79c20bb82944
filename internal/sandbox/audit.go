package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/soda-project/soda/internal/logevent"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// Record is one entry of a sandbox's audit trail: its start with what was
// granted, each layer applied or waived, the environment keys dropped,
// every egress attempt, and its end.
type Record struct {
	// Seq numbers a sandbox's records from 1 in the order they were made;
	// every sink gets the same numbers, so the journal's copy and a JSON
	// file can be matched, and a gap shows a record left out.
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Event is start, layer, env, ready, egress, refused (the sandbox did
	// not start, or, during the run, the repository guard undid what the
	// agent planted in a repository it made: Detail says what),
	// protected (the guard protected a repository made during the run:
	// Detail names it; newrepo.go), planted (what
	// the run made where no mount could protect it and the host may run:
	// Detail lists the paths), grant or revoke (an egress grant added or
	// taken away while the sandbox runs: Grants holds it, By who asked,
	// Detail the grants in force after), exit, exec and exec-exit (a
	// command of a live sandbox started, with its pid inside, and ended,
	// with its status), or dropped (a sink's summary of the egress records
	// it left out).
	Event      string   `json:"event"`
	Layer      Layer    `json:"layer,omitempty"`
	State      string   `json:"state,omitempty"` // applied or degraded
	Detail     string   `json:"detail,omitempty"`
	Argv       []string `json:"argv,omitempty"`
	ReadOnly   []string `json:"ro,omitempty"`
	ReadWrite  []string `json:"rw,omitempty"`
	Grants     []string `json:"grants,omitempty"`
	Limits     *Limits  `json:"limits,omitempty"`
	Degradable []Layer  `json:"allow_degraded,omitempty"`
	// Unprotected lists the protected paths the caller left writable
	// (--unprotect), on the start record.
	Unprotected []string      `json:"unprotected,omitempty"`
	Dropped     []EnvDrop     `json:"env_dropped,omitempty"`
	Pid         int           `json:"pid,omitempty"`
	Egress      *egress.Event `json:"egress,omitempty"`
	Exit        *ExitStatus   `json:"exit,omitempty"`
	DurationMS  float64       `json:"duration_ms,omitempty"`
	// By is who asked for a grant or revoke.
	By string `json:"by,omitempty"`
}

func (sb *Sandbox) record(r Record) {
	r.Seq = sb.seq.Add(1)
	r.Time = time.Now()
	r.Sandbox = sb.ID
	if r.Event == "egress" && r.Egress != nil && sb.logGate.allow(r.Time, func(n int) {
		sb.log.Warn("egress log lines suppressed (the audit record has them all)", "suppressed", n)
	}) {
		lvl := slog.LevelInfo
		if r.Egress.Decision != "allow" {
			lvl = slog.LevelWarn
		}
		sb.log.Log(context.Background(), lvl, "egress "+r.Egress.Decision, "kind", r.Egress.Kind, "target", r.Egress.Target,
			"addr", r.Egress.Addr, "reason", r.Egress.Reason, "bytes_up", r.Egress.BytesUp, "bytes_down", r.Egress.BytesDown)
	}
	if sb.audit != nil {
		sb.audit(r)
	}
}

// logRate is how many egress records a log sink takes per second; a
// sandbox that floods the proxy must not flood the journal (whose own
// rate limit would then drop other services' entries). --audit-json
// takes every record.
const logRate = 200

// rateGate lets logRate events per second through and counts the rest.
type rateGate struct {
	mu         sync.Mutex
	window     time.Time
	n, dropped int
}

// allow reports whether an event at now may be logged; when a new window
// starts after drops, report is called with their number first.
func (g *rateGate) allow(now time.Time, report func(dropped int)) bool {
	g.mu.Lock()
	if now.Sub(g.window) >= time.Second {
		dropped := g.dropped
		g.window, g.n, g.dropped = now, 0, 0
		g.mu.Unlock()
		if dropped > 0 {
			report(dropped)
		}
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	if g.n >= logRate {
		g.dropped++
		return false
	}
	g.n++
	return true
}

// LogAudit returns an audit sink that logs the records on log (for
// journald: one entry per record, its fields as SODA_* fields), at most
// logRate egress records a second (a summary says how many were left
// out). Egress denials and waived layers are warnings, the rest
// informational.
func LogAudit(log *slog.Logger) func(Record) {
	var gate rateGate
	return func(r Record) {
		if r.Event == "egress" && !gate.allow(r.Time, func(n int) {
			log.Warn("sandbox egress suppressed", "sandbox", r.Sandbox, "suppressed", n)
		}) {
			return
		}
		lvl := slog.LevelInfo
		attrs := []any{"sandbox", r.Sandbox, "seq", r.Seq}
		msg := "sandbox " + r.Event
		if ev, ok := auditEvents[r.Event]; ok {
			attrs = append(attrs, ev)
		}
		switch r.Event {
		case "start":
			attrs = append(attrs, "argv", strings.Join(r.Argv, " "), "grants", strings.Join(r.Grants, ","),
				"rw", strings.Join(r.ReadWrite, ":"), "ro", strings.Join(r.ReadOnly, ":"))
		case "layer":
			msg = "sandbox layer"
			attrs = append(attrs, "layer", string(r.Layer), "state", r.State, "detail", r.Detail)
			if r.State != "applied" {
				lvl = slog.LevelWarn
			}
		case "env":
			msg = "sandbox layer"
			keys := make([]string, len(r.Dropped))
			for i, d := range r.Dropped {
				keys[i] = d.Key
			}
			attrs = append(attrs, "layer", "env", "dropped", strings.Join(keys, ","))
		case "egress":
			if r.Egress == nil {
				return
			}
			e := r.Egress
			attrs = append(attrs, "kind", e.Kind, "target", e.Target, "decision", e.Decision, "reason", e.Reason,
				"addr", e.Addr, "bytes_up", e.BytesUp, "bytes_down", e.BytesDown, "duration_ms", e.DurationMS)
			if e.Decision != "allow" {
				lvl = slog.LevelWarn
			}
		case "grant", "revoke":
			msg = "sandbox egress " + r.Event
			attrs = append(attrs, "grants", strings.Join(r.Grants, ","), "by", r.By, "detail", r.Detail)
		case "refused":
			lvl = slog.LevelError
			attrs = append(attrs, "detail", r.Detail)
		case "protected":
			attrs = append(attrs, "detail", r.Detail)
		case "planted":
			lvl = slog.LevelWarn
			msg = "sandbox planted files the host may run (made during the run, where nothing protected them): check them before using them"
			attrs = append(attrs, "paths", r.Detail)
		case "exit":
			if r.Exit != nil {
				attrs = append(attrs, "code", r.Exit.Code, "signal", r.Exit.Signal, "timed_out", r.Exit.TimedOut)
			}
			attrs = append(attrs, "duration_ms", r.DurationMS)
		case "exec": // a command of a live sandbox started
			attrs = append(attrs, "argv", strings.Join(r.Argv, " "), "pid", r.Pid)
		case "exec-exit":
			attrs = append(attrs, "argv", strings.Join(r.Argv, " "))
			if r.Exit != nil {
				attrs = append(attrs, "code", r.Exit.Code, "signal", r.Exit.Signal, "timed_out", r.Exit.TimedOut)
			}
		case "ready":
			return // the start and layer records say it all
		}
		log.Log(context.Background(), lvl, msg, attrs...)
	}
}

// auditEvents are the key events of the audit trail's records, by
// Record.Event (their journal MESSAGE_IDs: see logevent).
var auditEvents = map[string]logevent.Event{
	"start":     logevent.SandboxStart,
	"layer":     logevent.SandboxLayer,
	"env":       logevent.SandboxLayer,
	"egress":    logevent.SandboxEgress,
	"grant":     logevent.SandboxEgress,
	"revoke":    logevent.SandboxEgress,
	"refused":   logevent.SandboxRefused,
	"protected": logevent.SandboxLayer,
	"exit":      logevent.SandboxExit,
}

// DefaultAuditJSONMax is how many bytes a JSON audit sink writes at most
// before it leaves out egress records (a flood of denied connections wrote
// 18 MB in 15 s when there was no cap).
const DefaultAuditJSONMax = 64 << 20

// JSONAudit writes records as JSON lines to w; safe for concurrent use.
// Once it has written its cap, it leaves out egress records (every other
// record is still written: there are few) and Close writes a "dropped"
// record saying how many, with their sequence numbers.
type JSONAudit struct {
	mu      sync.Mutex
	w       io.Writer
	buf     bytes.Buffer
	max     int64
	written int64
	dropped struct {
		n           int
		first, last uint64
		sandbox     string
	}
}

// NewJSONAudit returns an audit sink writing JSON lines to w, at most max
// bytes of them (0: DefaultAuditJSONMax) before egress records are left
// out.
func NewJSONAudit(w io.Writer, max int64) *JSONAudit {
	if max <= 0 {
		max = DefaultAuditJSONMax
	}
	return &JSONAudit{w: w, max: max}
}

// Write appends one record.
func (a *JSONAudit) Write(r Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf.Reset()
	if err := json.NewEncoder(&a.buf).Encode(r); err != nil {
		return
	}
	if r.Event == "egress" && a.written+int64(a.buf.Len()) > a.max {
		d := &a.dropped
		if d.n == 0 {
			d.first, d.sandbox = r.Seq, r.Sandbox
		}
		d.n++
		d.last = r.Seq
		return
	}
	n, _ := a.w.Write(a.buf.Bytes())
	a.written += int64(n)
}

// Close writes the summary of what was left out, if anything was.
func (a *JSONAudit) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, max := a.dropped, a.max
	if d.n == 0 {
		return
	}
	a.buf.Reset()
	_ = json.NewEncoder(&a.buf).Encode(Record{Time: time.Now(), Sandbox: d.sandbox, Event: "dropped",
		Detail: fmt.Sprintf("%d egress records (seq %d to %d) left out after this file's cap of %d bytes", d.n, d.first, d.last, max)})
	_, _ = a.w.Write(a.buf.Bytes())
}
