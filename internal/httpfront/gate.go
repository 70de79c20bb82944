package httpfront

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// gate bounds the connections of a Front, across all its listeners, without
// letting clients that lack the token keep out those that have it. Every
// connection of a Front goes through its gate, which also measures request
// headers (see headerScan).
//
// Every accepted connection takes one of max slots. A connection is pending
// until a request on it passes the Host, Origin and token checks, then
// authenticated. When all slots are taken and a new connection arrives, the
// oldest pending connection is closed to make room for it; only when every
// slot is held by an authenticated connection does the new one wait for a
// slot to be freed. A pending connection cannot hold its slot long anyway:
// it is closed when it sends no complete request headers within ReadTimeout
// and after any refused request. So an attacker without the token, however
// many connections it opens, can only delay a token holder by racing its
// connection out before its first request arrives, which needs a fresh
// connection per eviction.
type gate struct {
	log         *slog.Logger
	max         int // 0: no limit
	headerLimit int // MaxHeaderBytes, for each connection's headerScan

	mu      sync.Mutex
	used    int           // slots taken
	pending list.List     // of *gatedConn, oldest first
	freed   chan struct{} // closed and replaced whenever a slot is freed
}

func newGate(log *slog.Logger, max, headerLimit int) *gate {
	return &gate{log: log, max: max, headerLimit: headerLimit, freed: make(chan struct{})}
}

// admit gives c a slot, evicting the oldest pending connection if needed,
// or waits for one until done is closed; it then closes c and reports false.
func (g *gate) admit(c net.Conn, done <-chan struct{}) (*gatedConn, bool) {
	for {
		g.mu.Lock()
		if g.max <= 0 || g.used < g.max {
			g.used++
			gc := &gatedConn{Conn: c, g: g, headers: headerScan{limit: g.headerLimit}}
			gc.elem = g.pending.PushBack(gc)
			g.mu.Unlock()
			return gc, true
		}
		var victim *gatedConn
		if e := g.pending.Front(); e != nil {
			victim = e.Value.(*gatedConn)
			g.pending.Remove(e)
			victim.elem = nil
		}
		freed := g.freed
		g.mu.Unlock()
		if victim != nil {
			g.log.Debug("connection limit reached: closing the oldest unauthenticated connection",
				"max_connections", g.max, "closed", victim.RemoteAddr().String(), "new", c.RemoteAddr().String())
			victim.Close() // frees its slot
			continue
		}
		select {
		case <-freed:
		case <-done:
			c.Close()
			return nil, false
		}
	}
}

// release frees the slot of gc.
func (g *gate) release(gc *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.elem != nil {
		g.pending.Remove(gc.elem)
		gc.elem = nil
	}
	g.used--
	close(g.freed)
	g.freed = make(chan struct{})
}

// authenticate makes gc safe from eviction.
func (g *gate) authenticate(gc *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.elem != nil {
		g.pending.Remove(gc.elem)
		gc.elem = nil
	}
}

// gatedConn is a connection holding a slot of a gate until it is closed.
type gatedConn struct {
	net.Conn
	g       *gate
	elem    *list.Element // in g.pending while pending; guarded by g.mu
	authed  atomic.Bool
	once    sync.Once
	headers headerScan
}

// Read reads from the connection and measures the request headers.
func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.headers.feed(p[:n])
	return n, err
}

// Close closes the connection and frees its slot.
func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c) })
	return err
}

// CloseWrite half-closes a TCP connection, which net/http uses to let the
// client read an error response before the connection is closed.
func (c *gatedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// authenticated records that a request on c passed every check.
func (c *gatedConn) authenticated() {
	if !c.authed.Swap(true) {
		c.g.authenticate(c)
	}
}

// gatedListener admits the connections of a listener through a gate.
type gatedListener struct {
	net.Listener
	g    *gate
	done chan struct{}
	once sync.Once
}

func (g *gate) listener(l net.Listener) *gatedListener {
	return &gatedListener{Listener: l, g: g, done: make(chan struct{})}
}

// Accept accepts the next connection and waits for a slot for it.
func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc, ok := l.g.admit(c, l.done)
	if !ok {
		return nil, net.ErrClosed
	}
	return gc, nil
}

// Close closes the listener and ends a wait for a slot in Accept.
func (l *gatedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type connKey struct{}

// connState restarts the header measurement of a connection that went idle
// after a response: what it reads next is the next request.
func connState(c net.Conn, st http.ConnState) {
	if gc, ok := c.(*gatedConn); ok && st == http.StateIdle {
		gc.headers.reset()
	}
}

// connContext makes a gated connection reachable from its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*gatedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}
