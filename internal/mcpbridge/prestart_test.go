package mcpbridge_test

import (
	"strings"
	"testing"
	"time"
)

// TestPrestart: a child started before any client is the first session's,
// its start-up already done, and that session's initialize is reported as
// the start-up check; a server that dies at once is reported with its
// stderr before any client comes; an untaken child ends with Shutdown.
func TestPrestart(t *testing.T) {
	firstStart := func(t *testing.T, h *harness) error {
		t.Helper()
		select {
		case err := <-h.Bridge.FirstStart():
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no start-up outcome in 10 s")
			return nil
		}
	}
	// waitChildren waits up to 10 s for the bridge to hold n children.
	waitChildren := func(h *harness, n int64) {
		for deadline := time.Now().Add(10 * time.Second); h.Bridge.Stats().Children != n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Run("the first session takes it", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.Bridge.Prestart()
		// The child runs before any client: one child, no session.
		waitChildren(h, 1)
		if st := h.Bridge.Stats(); st.Children != 1 || st.Sessions != 0 {
			t.Fatalf("before any client: %+v, want 1 child and no session", st)
		}
		sid := h.open("2025-06-18")
		if err := firstStart(t, h); err != nil {
			t.Fatalf("start-up check: %v", err)
		}
		h.mustEcho(sid)
		// The session's child is the prestarted one: still one child.
		if st := h.Bridge.Stats(); st.Children != 1 || st.Sessions != 1 {
			t.Errorf("after the first session: %+v, want its one child", st)
		}
		// The next session starts a child of its own.
		h.mustEcho(h.open("2025-06-18"))
		if st := h.Bridge.Stats(); st.Children != 2 {
			t.Errorf("after a second session: %d children, want 2", st.Children)
		}
		if !strings.Contains(h.Logs.String(), "prestarted=true") {
			t.Errorf("no session start logged as prestarted:\n%s", h.Logs.String())
		}
	})
	t.Run("a server that dies at once", func(t *testing.T) {
		h := newHarness(t, harnessOpts{argv: []string{"sh", "-c", "echo no config for the test server >&2; exit 3"}})
		h.Bridge.Prestart()
		err := firstStart(t, h)
		if err == nil || !strings.Contains(err.Error(), "no config for the test server") {
			t.Fatalf("start-up check: %v, want the server's stderr", err)
		}
		// A client then gets a fresh start (which fails the same way).
		if r := h.post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); r.Status == 200 {
			t.Errorf("initialize of a dead server: status 200: %s", r.Body)
		}
	})
	t.Run("untaken, expired when idle", func(t *testing.T) {
		h := newHarness(t, harnessOpts{idle: 300 * time.Millisecond})
		h.Bridge.Prestart()
		waitChildren(h, 1)
		waitChildren(h, 0)
		if n := h.Bridge.Stats().Children; n != 0 {
			t.Fatalf("%d children 10 s after the start, want the untaken one expired", n)
		}
		select {
		case err := <-h.Bridge.FirstStart():
			t.Errorf("an expired child reported %v, want nothing", err)
		case <-time.After(200 * time.Millisecond):
		}
		// A client then gets a fresh child.
		h.mustEcho(h.open("2025-06-18"))
	})
	t.Run("untaken, then shut down", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.Bridge.Prestart()
		waitChildren(h, 1)
		h.stop()
		if st := h.Bridge.Stats(); st.Children != 0 {
			t.Errorf("after Shutdown: %d children, want 0", st.Children)
		}
	})
}
