package cgroup

import (
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as the child gate, as soda-mcpd
// does: the scope placer starts every gated child as /proc/self/exe.
func TestMain(m *testing.M) {
	if IsGate() {
		RunGate()
	}
	os.Exit(m.Run())
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
