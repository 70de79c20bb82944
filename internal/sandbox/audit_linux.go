package sandbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/soda-project/soda/internal/llmgateway"
)

// RecordModel adds a request through the run's model gateway to the
// sandbox's audit trail.
func (sb *Sandbox) RecordModel(ev llmgateway.Event) {
	sb.record(Record{Event: "llm", LLM: &ev})
}

func (sb *Sandbox) record(r Record) {
	r.Seq = sb.seq.Add(1)
	r.Time = time.Now()
	r.Sandbox = sb.ID
	if r.Event == "egress" && r.Egress != nil {
		ok, held := sb.logGate.Allow(r.Time)
		if held > 0 {
			lvl := slog.LevelWarn
			if sb.quietEgress {
				lvl = slog.LevelDebug
			}
			sb.log.Log(context.Background(), lvl, "egress log lines suppressed (the audit record has them all)", "suppressed", held)
		}
		if ok {
			lvl := slog.LevelInfo
			switch {
			case sb.quietEgress:
				lvl = slog.LevelDebug
			case r.Egress.Decision != "allow":
				lvl = slog.LevelWarn
			}
			sb.log.Log(context.Background(), lvl, "egress "+r.Egress.Decision, "kind", r.Egress.Kind, "target", r.Egress.Target,
				"addr", r.Egress.Addr, "reason", r.Egress.Reason, "bytes_up", r.Egress.BytesUp, "bytes_down", r.Egress.BytesDown)
		}
	}
	if sb.audit != nil {
		sb.audit(r)
	}
}

// logRate is how many egress records a second a sandbox logs on its
// logger (the audit sinks, internal/auditsink, get them all); a sandbox
// that floods the proxy must not flood its caller's log.
const logRate = 200
