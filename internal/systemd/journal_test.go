package systemd

import (
	"github.com/soda-project/soda/internal/logevent"
	"log/slog"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

func TestJournalHandlerFields(t *testing.T) {
	type sent struct {
		msg  string
		pri  journal.Priority
		vars map[string]string
	}
	var got []sent
	h := NewJournalHandler(slog.LevelInfo)
	h.send = func(msg string, p journal.Priority, vars map[string]string) error {
		got = append(got, sent{msg, p, vars})
		return nil
	}
	log := slog.New(h).With("server", "jira")
	log.Debug("dropped")
	log.With("session", "ab12cd34").Warn("auth failure", logevent.AuthFailure, "remote", "127.0.0.1:5", "http.path", "/mcp")
	// The id follows the event attribute, not the wording: a message
	// without the attribute gets none, whatever it says.
	log.Warn("auth failure", "remote", "127.0.0.1:6")
	if len(got) != 2 {
		t.Fatalf("sent %d records, want 2 (debug is below the level)", len(got))
	}
	if id, ok := got[1].vars["MESSAGE_ID"]; ok {
		t.Errorf("a record without an event attribute got MESSAGE_ID %s", id)
	}
	if _, ok := got[0].vars["SODA_EVENT_ID"]; ok {
		t.Error("the event attribute leaked as a field")
	}
	r := got[0]
	for k, want := range map[string]string{
		"SODA_SERVER":    "jira",
		"SODA_SESSION":   "ab12cd34",
		"SODA_REMOTE":    "127.0.0.1:5",
		"SODA_HTTP_PATH": "/mcp",
		"SODA_EVENT":     "auth failure",
		"MESSAGE_ID":     logevent.MessageIDs["auth-failure"],
	} {
		if r.vars[k] != want {
			t.Errorf("%s = %q, want %q", k, r.vars[k], want)
		}
	}
	if r.pri != journal.PriWarning {
		t.Errorf("priority %v, want warning", r.pri)
	}
	if r.msg != "auth failure remote=127.0.0.1:5 http.path=/mcp" {
		t.Errorf("message %q", r.msg)
	}
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{"session": "SODA_SESSION", "max-sessions": "SODA_MAX_SESSIONS", "a.b": "SODA_A_B"} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestActivatedWithoutSystemd(t *testing.T) {
	t.Setenv("LISTEN_PID", "")
	t.Setenv("LISTEN_FDS", "")
	if Activated() {
		t.Fatal("Activated() without LISTEN_* variables")
	}
	if _, err := Listeners(); err == nil {
		t.Fatal("Listeners() without activation must fail")
	}
}
