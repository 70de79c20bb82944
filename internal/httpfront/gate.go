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

// pendingPerSlot is how many connections that have not authenticated yet
// may be open per MaxConnections slot.
const pendingPerSlot = 4

// gate bounds the connections of a Front, across all its listeners, without
// letting clients that lack the token keep out those that have it. Every
// connection of a Front goes through its gate, which also measures request
// headers (see headerScan).
//
// A connection is pending until a request on it passes the Host, Origin and
// token checks, then authenticated. At most max connections are
// authenticated; a connection that authenticates while all max are taken
// waits for one of them to close before its request is served, as it would
// have waited to be accepted. Pending connections have a pool of their own,
// pendingPerSlot times larger: when it is full and a connection arrives, the
// oldest pending connection whose request has not arrived is closed to make
// room (see victim). A pending connection
// cannot stay long anyway: it is closed when it sends no complete request
// headers within ReadTimeout, and after any refused request.
//
// So an attacker without the token never delays a token holder's
// connection by holding connections, only by opening them: to push a new
// connection out before its request arrives, it must open a whole pool's
// worth of connections in that time. (Measured on 2 cores shared with the
// attacking process: at 10,000 to 17,000 new connections a second, 0 to 2 of
// 50 token holders' connections were closed that way.)
type gate struct {
	log         *slog.Logger
	max         int // authenticated connections; 0: no limit
	pendingMax  int // pending connections, including those waiting for a slot
	headerLimit int // MaxHeaderBytes, for each connection's headerScan
	m           Metrics

	mu      sync.Mutex
	authed  int           // authenticated connections
	waiting int           // authenticated, waiting for a slot
	pending list.List     // of *gatedConn that may be evicted, oldest first
	freed   chan struct{} // closed and replaced whenever a connection closes
}

func newGate(log *slog.Logger, max, headerLimit int) *gate {
	return &gate{log: log, max: max, pendingMax: pendingPerSlot * max, headerLimit: headerLimit, m: noMetrics{}, freed: make(chan struct{})}
}

// connection states
const (
	statePending = iota // in g.pending
	stateWaiting        // authenticated, waiting for a slot
	stateAuthed         // holds one of the max slots
	stateClosed
)

// admit admits c as pending, evicting the oldest pending connection when the
// pool is full, or waits for room until done is closed; it then closes c and
// reports false.
func (g *gate) admit(c net.Conn, done <-chan struct{}) (*gatedConn, bool) {
	for {
		g.mu.Lock()
		if g.max <= 0 || g.pending.Len()+g.waiting < g.pendingMax {
			gc := &gatedConn{Conn: c, g: g, headers: headerScan{limit: g.headerLimit}}
			gc.elem = g.pending.PushBack(gc)
			g.mu.Unlock()
			return gc, true
		}
		victim := g.victim()
		freed := g.freed
		g.mu.Unlock()
		if victim != nil {
			g.m.LimitHit("connections")
			g.log.Debug("too many unauthenticated connections: closing the oldest without a request",
				"max", g.pendingMax, "closed", victim.RemoteAddr().String(), "new", c.RemoteAddr().String())
			victim.Close()
			continue
		}
		// Every pending connection is a token holder waiting for a slot.
		select {
		case <-freed:
		case <-done:
			c.Close()
			return nil, false
		}
	}
}

// victimScan is how many of the oldest pending connections victim looks at.
const victimScan = 16

// victim picks the pending connection to close for a newcomer: the oldest
// whose request has not arrived, among the victimScan oldest, else the
// oldest. A request has arrived when its bytes wait unread in the kernel or
// its headers were read and are being checked: that connection is about to
// authenticate or be refused, and closing it would let an attacker who
// opens connections fast enough push a token holder out while the server,
// short of CPU, had not got to its request yet. Called with g.mu held.
func (g *gate) victim() *gatedConn {
	first := g.pending.Front()
	e := first
	for i := 0; e != nil && i < victimScan; i, e = i+1, e.Next() {
		gc := e.Value.(*gatedConn)
		if !gc.headers.complete() && !queued(gc.Conn) {
			return gc
		}
	}
	if first == nil {
		return nil
	}
	return first.Value.(*gatedConn)
}

// authenticate moves gc out of the pending pool and gives it a slot,
// waiting for one until ctx is done; it then reports false. waited reports
// whether all slots were taken.
func (g *gate) authenticate(ctx context.Context, gc *gatedConn) (ok, waited bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.state != statePending {
		return gc.state == stateAuthed, false
	}
	g.pending.Remove(gc.elem)
	gc.elem = nil
	gc.state = stateWaiting
	g.waiting++
	if g.max > 0 && g.authed >= g.max {
		g.m.LimitHit("connections")
	}
	for g.max > 0 && g.authed >= g.max {
		waited = true
		freed := g.freed
		g.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
		}
		g.mu.Lock()
		if gc.state != stateWaiting { // closed meanwhile
			return false, true
		}
		if ctx.Err() != nil {
			return false, true
		}
	}
	g.waiting--
	g.authed++
	gc.state = stateAuthed
	return true, waited
}

// release forgets gc, which was closed.
func (g *gate) release(gc *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch gc.state {
	case statePending:
		g.pending.Remove(gc.elem)
		gc.elem = nil
	case stateWaiting:
		g.waiting--
	case stateAuthed:
		g.authed--
	}
	gc.state = stateClosed
	close(g.freed)
	g.freed = make(chan struct{})
}

// gatedConn is a connection admitted by a gate, which it leaves when closed.
type gatedConn struct {
	net.Conn
	g       *gate
	elem    *list.Element // in g.pending while statePending; guarded by g.mu
	state   int           // guarded by g.mu
	authed  atomic.Bool   // authenticate succeeded
	once    sync.Once
	headers headerScan
	counted bool // this request's header limit hit is counted (Read's goroutine)
}

// Read reads from the connection and measures the request headers.
func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 1 && len(p) == 1 {
		c.headers.next() // net/http's background read (headerScan.next)
	}
	c.headers.feed(p[:n])
	// Counted here: net/http answers 431 itself when the headers exceed
	// its own bound, before ServeHTTP sees the request.
	if over := c.headers.tooLarge(); over && !c.counted {
		c.counted = true
		c.g.m.LimitHit("headers")
	} else if !over {
		c.counted = false
	}
	return n, err
}

// Close closes the connection and frees its place.
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

// authenticated records that a request on c passed every check, and waits
// until c holds a slot; ok false means ctx ended first. waited reports
// whether it had to wait.
func (c *gatedConn) authenticated(ctx context.Context) (ok, waited bool) {
	if c.authed.Load() {
		return true, false
	}
	ok, waited = c.g.authenticate(ctx, c)
	if ok {
		c.authed.Store(true)
	}
	return ok, waited
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

// Accept accepts the next connection and waits for room for it.
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

// Close closes the listener and ends a wait for room in Accept.
func (l *gatedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type connKey struct{}

// connContext makes a gated connection reachable from its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*gatedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// connState restarts the header measurement of a connection that went idle
// after a response: what it reads next is the next request.
func connState(c net.Conn, st http.ConnState) {
	if gc, ok := c.(*gatedConn); ok && st == http.StateIdle {
		gc.headers.reset()
	}
}
