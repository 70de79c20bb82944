package httpfront

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestGateVictim checks which pending connection is closed for a newcomer:
// the oldest whose request has not arrived, else the oldest.
func TestGateVictim(t *testing.T) {
	g := newGate(discardLogger(), 1, 1024)
	var conns []*gatedConn
	for range g.pendingMax {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		gc, ok := g.admit(a, nil)
		if !ok {
			t.Fatal("admit refused a connection below the pool size")
		}
		conns = append(conns, gc)
	}
	g.mu.Lock()
	if v := g.victim(); v != conns[0] {
		t.Errorf("victim is connection %d, want the oldest", index(conns, v))
	}
	g.mu.Unlock()

	// The oldest has sent complete headers: it is about to authenticate.
	conns[0].headers.feed([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	g.mu.Lock()
	if v := g.victim(); v != conns[1] {
		t.Errorf("victim is connection %d, want 1 (0 has a request being checked)", index(conns, v))
	}
	g.mu.Unlock()

	// All have: the oldest goes after all.
	for _, c := range conns[1:] {
		c.headers.feed([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	}
	g.mu.Lock()
	if v := g.victim(); v != conns[0] {
		t.Errorf("victim is connection %d, want the oldest when every request has arrived", index(conns, v))
	}
	g.mu.Unlock()

	// An authenticated connection leaves the pool and is never a victim;
	// at the full pool, a newcomer evicts the only pending connection whose
	// request has not arrived, however young.
	if ok, _ := conns[1].authenticated(context.Background()); !ok {
		t.Fatal("authenticate with a free slot failed")
	}
	admit := func() *gatedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		gc, ok := g.admit(a, nil)
		if !ok {
			t.Fatal("admit failed")
		}
		return gc
	}
	silent := admit() // fills the pool again
	admit()
	g.mu.Lock()
	defer g.mu.Unlock()
	if silent.state != stateClosed {
		t.Error("the connection without a request was not closed for the newcomer")
	}
	if conns[0].state != statePending {
		t.Errorf("the oldest connection, whose request has arrived, is in state %d, want pending", conns[0].state)
	}
	if conns[1].state != stateAuthed {
		t.Errorf("the authenticated connection is in state %d", conns[1].state)
	}
}

// TestGateWaitsForSlot checks that a connection that authenticates while
// every slot is taken waits for one, and gives up when its context ends.
func TestGateWaitsForSlot(t *testing.T) {
	g := newGate(discardLogger(), 1, 0)
	admit := func() *gatedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		gc, ok := g.admit(a, nil)
		if !ok {
			t.Fatal("admit failed")
		}
		return gc
	}
	first, second, third := admit(), admit(), admit()
	if ok, waited := first.authenticated(context.Background()); !ok || waited {
		t.Fatalf("first: ok %v waited %v, want a slot at once", ok, waited)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ok, _ := third.authenticated(ctx); ok {
		t.Fatal("third got a slot while the only one was taken")
	}
	done := make(chan bool)
	go func() {
		ok, waited := second.authenticated(context.Background())
		done <- ok && waited
	}()
	select {
	case <-done:
		t.Fatal("second got a slot while the only one was taken")
	case <-time.After(50 * time.Millisecond):
	}
	first.Close()
	select {
	case ok := <-done:
		if !ok {
			t.Error("second did not get the freed slot after waiting")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second still waiting 5s after the slot was freed")
	}
}

func index(conns []*gatedConn, c *gatedConn) int {
	for i, x := range conns {
		if x == c {
			return i
		}
	}
	return -1
}
