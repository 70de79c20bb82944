package systemd

import (
	"context"
	"fmt"
	"github.com/soda-project/soda/internal/logevent"
	"log/slog"
	"strings"

	"github.com/coreos/go-systemd/v22/journal"
)

// StderrIsJournal reports whether stderr is connected to journald
// ($JOURNAL_STREAM matches), so logs can go there natively.
func StderrIsJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok && journal.Enabled()
}

// JournalAvailable reports whether journald's socket is there to log to.
func JournalAvailable() bool { return journal.Enabled() }

// JournalHandler is a slog.Handler that sends records to journald with
// every attribute as a field: "session" becomes SODA_SESSION and so on,
// SODA_EVENT the message, the usual PRIORITY, and for a key event (a
// logevent attribute) its catalog MESSAGE_ID instead of a field.
type JournalHandler struct {
	level  slog.Leveler
	fields map[string]string
	group  string
	send   func(msg string, p journal.Priority, vars map[string]string) error
}

// NewJournalHandler returns a handler logging records at or above level.
func NewJournalHandler(level slog.Leveler) *JournalHandler {
	return &JournalHandler{level: level, fields: map[string]string{}, send: journal.Send}
}

// Enabled implements slog.Handler.
func (h *JournalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// Handle implements slog.Handler.
func (h *JournalHandler) Handle(_ context.Context, r slog.Record) error {
	vars := make(map[string]string, len(h.fields)+r.NumAttrs()+3)
	for k, v := range h.fields {
		vars[k] = v
	}
	var extra []string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == logevent.Key {
			if id, ok := logevent.MessageIDs[a.Value.String()]; ok {
				vars["MESSAGE_ID"] = id
			}
			return true
		}
		addAttr(vars, h.group, a)
		// Keep the message readable in plain `journalctl` output too.
		extra = append(extra, a.Key+"="+quote(a.Value.String()))
		return true
	})
	vars["SODA_EVENT"] = r.Message
	msg := r.Message
	if len(extra) > 0 {
		msg += " " + strings.Join(extra, " ")
	}
	return h.send(msg, priority(r.Level), vars)
}

func quote(s string) string {
	if strings.ContainsAny(s, " \t\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// WithAttrs implements slog.Handler.
func (h *JournalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.fields = make(map[string]string, len(h.fields)+len(attrs))
	for k, v := range h.fields {
		c.fields[k] = v
	}
	for _, a := range attrs {
		addAttr(c.fields, h.group, a)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *JournalHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		c.group += "_"
	}
	c.group += name
	return &c
}

func addAttr(vars map[string]string, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		g := a.Key
		if group != "" {
			g = group + "_" + g
		}
		for _, ga := range a.Value.Group() {
			addAttr(vars, g, ga)
		}
		return
	}
	key := a.Key
	if group != "" {
		key = group + "_" + key
	}
	vars[fieldName(key)] = a.Value.String()
}

// fieldName turns an attribute key into a journal field name: SODA_ and the
// key in upper case, with anything outside [A-Z0-9_] replaced by '_'.
func fieldName(key string) string {
	var b strings.Builder
	b.WriteString("SODA_")
	for _, r := range strings.ToUpper(key) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}
