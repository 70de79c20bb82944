// Package logevent names soda's key log events. A key event is logged with
// its Event as an attribute (`log.Info("serving", logevent.Serving, ...)`):
// text and JSON logs show it as event=serving, and the journal handler
// (internal/systemd) turns it into the event's catalog MESSAGE_ID, so that
// `journalctl MESSAGE_ID=…` finds every occurrence whatever the message's
// wording becomes.
package logevent

import "log/slog"

// Key is the attribute key of an event.
const Key = "event"

// An Event is a key event's attribute; its value is the event's stable name.
type Event = slog.Attr

func event(name string) Event { return slog.String(Key, name) }

// soda-mcpd's events.
var (
	Serving      = event("serving")
	Draining     = event("draining")
	Stopped      = event("stopped")
	SessionStart = event("session-start")
	SessionEnd   = event("session-end")
	ChildExit    = event("child-exit")
	AuthFailure  = event("auth-failure")
	LimitHit     = event("limit-hit")
	ChildStderr  = event("child-stderr")
)

// The sandbox audit trail's events.
var (
	SandboxStart   = event("sandbox-start")
	SandboxRefused = event("sandbox-refused")
	SandboxLayer   = event("sandbox-layer")
	SandboxEgress  = event("sandbox-egress")
	SandboxExit    = event("sandbox-exit")
)

// MessageIDs maps each event's name to its journal catalog id.
var MessageIDs = map[string]string{
	"serving":       "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c31",
	"draining":      "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c32",
	"stopped":       "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c33",
	"session-start": "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c34",
	"session-end":   "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c35",
	"child-exit":    "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c36",
	"auth-failure":  "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c37",
	"limit-hit":     "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c38",
	"child-stderr":  "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c39",

	"sandbox-start":   "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c41",
	"sandbox-refused": "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c42",
	"sandbox-layer":   "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c43",
	"sandbox-egress":  "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c44",
	"sandbox-exit":    "4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c45",
}
