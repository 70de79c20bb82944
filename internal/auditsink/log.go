package auditsink

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/soda-project/soda/internal/logevent"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/throttle"
)

// LogRate is how many egress records a Log takes per second; a sandbox
// that floods the proxy must not flood the journal (whose own rate limit
// would then drop other services' entries). The JSON sink takes every
// record.
const LogRate = 200

// Log logs audit records on a logger: for journald one entry per record,
// its fields as SODA_* fields and the key events' MESSAGE_IDs (logevent).
// Egress denials and waived layers are warnings, refusals errors, the rest
// informational. At most LogRate egress records a second are logged; a
// summary ("sandbox egress suppressed") says how many were left out, once,
// on the next one logged or at Close. It is safe for concurrent use.
type Log struct {
	log  *slog.Logger
	gate *throttle.Throttle

	mu   sync.Mutex
	last string // the sandbox of the last egress record held back
}

// NewLog returns a Log writing to log.
func NewLog(log *slog.Logger) *Log {
	return &Log{log: log, gate: throttle.New(LogRate)}
}

// Write logs r.
func (l *Log) Write(r sandbox.Record) {
	if r.Event == "egress" {
		ok, held := l.gate.Allow(r.Time)
		if held > 0 {
			l.suppressed(r.Sandbox, held)
		}
		if !ok {
			l.mu.Lock()
			l.last = r.Sandbox
			l.mu.Unlock()
			return
		}
	}
	lvl, msg, attrs, ok := logEntry(r)
	if ok {
		l.log.Log(context.Background(), lvl, msg, attrs...)
	}
}

// Close logs the summary of the egress records left out since the last
// one, if no record logged since has carried it.
func (l *Log) Close() {
	if held := l.gate.Flush(); held > 0 {
		l.mu.Lock()
		sb := l.last
		l.mu.Unlock()
		l.suppressed(sb, held)
	}
}

func (l *Log) suppressed(sandbox string, n int) {
	l.log.Warn("sandbox egress suppressed", "sandbox", sandbox, "suppressed", n)
}

// logEntry is the log entry of r: its level, message and attributes; ok
// is false for a record that is not logged (ready: the start and layer
// records say it all; an egress record without its event).
func logEntry(r sandbox.Record) (lvl slog.Level, msg string, attrs []any, ok bool) {
	lvl = slog.LevelInfo
	attrs = []any{"sandbox", r.Sandbox, "seq", r.Seq}
	msg = "sandbox " + r.Event
	if ev, ok := auditEvents[r.Event]; ok {
		attrs = append(attrs, ev)
	}
	switch r.Event {
	case "start":
		attrs = append(attrs, "argv", strings.Join(r.Argv, " "), "grants", strings.Join(r.Grants, ","),
			"rw", strings.Join(r.ReadWrite, ":"), "ro", strings.Join(r.ReadOnly, ":"))
		if r.Image != "" {
			attrs = append(attrs, "image", r.Image)
		}
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
			return lvl, msg, nil, false
		}
		e := r.Egress
		attrs = append(attrs, "kind", e.Kind, "target", e.Target, "decision", e.Decision, "reason", e.Reason,
			"addr", e.Addr, "bytes_up", e.BytesUp, "bytes_down", e.BytesDown, "duration_ms", e.DurationMS)
		if e.Decision != "allow" {
			lvl = slog.LevelWarn
		}
	case "llm":
		if r.LLM == nil {
			return lvl, msg, nil, false
		}
		e := r.LLM
		msg = "sandbox model request"
		attrs = append(attrs, "provider", e.Provider, "method", e.Method, "path", e.Path, "status", e.Status,
			"bytes_up", e.BytesUp, "bytes_down", e.BytesDown, "duration_ms", e.DurationMS,
			"input_tokens", e.Usage.Input, "output_tokens", e.Usage.Output,
			"cache_read_tokens", e.Usage.CacheRead, "cache_write_tokens", e.Usage.CacheWrite)
		if e.Refused != "" || e.UpstreamError != "" {
			lvl = slog.LevelWarn
			attrs = append(attrs, "refused", e.Refused, "upstream_error", e.UpstreamError)
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
		return lvl, msg, nil, false
	}
	return lvl, msg, attrs, true
}

// auditEvents are the key events of the audit trail's records, by
// Record.Event (their journal MESSAGE_IDs: see logevent).
var auditEvents = map[string]logevent.Event{
	"start":     logevent.SandboxStart,
	"layer":     logevent.SandboxLayer,
	"env":       logevent.SandboxLayer,
	"egress":    logevent.SandboxEgress,
	"llm":       logevent.SandboxEgress,
	"grant":     logevent.SandboxEgress,
	"revoke":    logevent.SandboxEgress,
	"refused":   logevent.SandboxRefused,
	"protected": logevent.SandboxLayer,
	"exit":      logevent.SandboxExit,
}
