package logevent

import (
	"regexp"
	"testing"
)

// TestEveryEventHasAnID: an event without a catalog id would reach the
// journal without MESSAGE_ID, and ids must be unique and well formed.
func TestEveryEventHasAnID(t *testing.T) {
	events := []Event{Serving, Draining, Stopped, SessionStart, SessionEnd, ChildExit, AuthFailure, LimitHit, ChildStderr,
		SandboxStart, SandboxRefused, SandboxLayer, SandboxEgress, SandboxExit}
	if len(events) != len(MessageIDs) {
		t.Errorf("%d events, %d ids", len(events), len(MessageIDs))
	}
	seen := map[string]string{}
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, e := range events {
		if e.Key != Key {
			t.Errorf("event %v has key %q", e, e.Key)
		}
		id, ok := MessageIDs[e.Value.String()]
		if !ok || !hex.MatchString(id) {
			t.Errorf("event %s: id %q", e.Value, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("events %s and %s share id %s", prev, e.Value, id)
		}
		seen[id] = e.Value.String()
	}
}
