// Package mcpbridge relays MCP JSON-RPC between HTTP clients and stdio MCP
// servers, one child per client session.
//
// The bridge never re-implements MCP methods: it forwards each message as it
// came and routes what the child writes back by JSON-RPC id, progress token
// or, for everything not tied to a request, to the session's GET stream or an
// in-flight POST stream. It speaks the Streamable HTTP transport of every
// revision go-sdk supports (sessions for 2024-11-05 … 2025-11-25, the
// stateless 2026-07-28 revision through a shared child) and the legacy
// HTTP+SSE transport.
package mcpbridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/logevent"
)

// Options configures a Bridge.
type Options struct {
	// Name is the server's instance name, for logs.
	Name string
	// Spec is the stdio server to start for each session.
	Spec child.Spec
	// Placer isolates each child (cgroup or process group).
	Placer cgroup.Placer
	// Grace is the child shutdown timing.
	Grace child.Grace

	// Metrics records the bridge (nil: off).
	Metrics Metrics

	MaxSessions          int
	IdleTimeout          time.Duration
	CallTimeout          time.Duration
	StartTimeout         time.Duration
	MaxBodyBytes         int64
	StderrLinesPerSecond int
}

// Bridge owns the sessions of one configured MCP server.
type Bridge struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	reserved int // sessions being started
	// stopping counts ended sessions whose child is not gone yet: they
	// keep their slot, so there are never more than MaxSessions children.
	stopping int
	// slotFreed is closed (and replaced) whenever such a child is gone.
	slotFreed chan struct{}
	draining  bool
	// childrenClosed is set once Shutdown waits for children: no child
	// may be counted (and so started) after that.
	childrenClosed bool
	children       sync.WaitGroup

	// ctx lives as long as the bridge: the shared stateless child starts
	// under it, not under the request that happened to ask first.
	ctx    context.Context
	cancel context.CancelFunc

	shared *sharedChild
	inputs *inputManager // input requests of stateless calls
	pre    *prestart     // the child started ahead (Prestart), or nil

	inflight atomic.Int64
	started  atomic.Int64
	calls    atomic.Int64 // requests relayed, all sessions
	live     atomic.Int64 // children not yet stopped
	counted  bool         // opts.Metrics was set: the relay times its calls
}

// Metrics is what the bridge counts; internal/metrics's Bridge implements
// it. Methods are JSON-RPC method names as the client sent them: the
// recorder bounds its labels itself.
type Metrics interface {
	SessionOpened()
	SessionRefused(reason string)
	SessionEnded(reason string)
	ChildStarted()
	ChildExited(status string)
	Calls(method string, n int)
	CallDone(method string, d time.Duration)
	Relayed(in, out int)
	LimitHit(limit string)
}

// noMetrics is Metrics off.
type noMetrics struct{}

func (noMetrics) SessionOpened()                 {}
func (noMetrics) SessionRefused(string)          {}
func (noMetrics) SessionEnded(string)            {}
func (noMetrics) ChildStarted()                  {}
func (noMetrics) ChildExited(string)             {}
func (noMetrics) Calls(string, int)              {}
func (noMetrics) CallDone(string, time.Duration) {}
func (noMetrics) Relayed(int, int)               {}
func (noMetrics) LimitHit(string)                {}

// New returns a bridge. Call Run to expire idle sessions and Shutdown to end
// all sessions.
func New(log *slog.Logger, opts Options) *Bridge {
	if opts.StderrLinesPerSecond <= 0 {
		opts.StderrLinesPerSecond = 50
	}
	if opts.Grace == (child.Grace{}) {
		opts.Grace = child.DefaultGrace
	}
	counted := opts.Metrics != nil
	if !counted {
		opts.Metrics = noMetrics{}
	}
	b := &Bridge{opts: opts, counted: counted, log: log, sessions: map[string]*Session{}, slotFreed: make(chan struct{})}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.shared = &sharedChild{b: b}
	b.inputs = newInputManager(b)
	return b
}

// SupportedVersions lists the protocol revisions the bridge accepts, newest
// first: exactly those of the go-sdk in go.mod (a test holds the two
// lists equal).
func SupportedVersions() []string { return slices.Clone(supportedVersions) }

// supportedVersions is go-sdk's mcp.SupportedProtocolVersions(), written
// out: the bridge needs nothing else of go-sdk, and linking it would cost
// every program that bridges (soda-mcpd, and sodactl for --mcp-config)
// go-sdk's package initialisation (its JSON-schema regexps among them) at
// each start: about 2 ms and 90 page faults on a paravirtualised guest.
var supportedVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Run expires idle sessions until ctx is done.
func (b *Bridge) Run(ctx context.Context) {
	every := b.opts.IdleTimeout / 4
	every = min(max(every, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.expireIdle()
		}
	}
}

func (b *Bridge) expireIdle() {
	now := time.Now()
	b.mu.Lock()
	var idle []*Session
	for _, s := range b.sessions {
		if last, ok := s.idleSince(); ok && now.Sub(last) > b.opts.IdleTimeout {
			idle = append(idle, s)
		}
	}
	b.mu.Unlock()
	for _, s := range idle {
		s.log.Info("session idle, expiring", "idle_timeout", b.opts.IdleTimeout.String())
		s.end(fmt.Sprintf("session expired after %s idle", b.opts.IdleTimeout))
	}
	b.shared.expireIdle(now)
	b.expirePrestarted(now)
}

// errFull is returned when MaxSessions sessions are live and every one of
// them is busy.
var errFull = errors.New("session limit reached")

// errDraining is returned while the bridge shuts down.
var errDraining = errors.New("server is draining")

// reserve takes a session slot. When all MaxSessions slots are taken it
// ends the session that has been idle longest (see
// Session.evictableLocked) and waits, within ctx, for its child to be gone;
// it fails with errFull only when every session is busy.
func (b *Bridge) reserve(ctx context.Context) error {
	for {
		b.mu.Lock()
		if b.draining {
			b.mu.Unlock()
			return errDraining
		}
		if len(b.sessions)+b.reserved+b.stopping < b.opts.MaxSessions {
			b.reserved++
			b.mu.Unlock()
			return nil
		}
		if b.stopping > 0 {
			// A slot frees as soon as a stopping child is gone.
			freed := b.slotFreed
			b.mu.Unlock()
			select {
			case <-freed:
				continue
			case <-ctx.Done():
				return fmt.Errorf("waiting for a session slot: %w", ctx.Err())
			}
		}
		victim, idle := b.longestIdleLocked()
		b.mu.Unlock()
		if victim == nil {
			return errFull
		}
		reason := fmt.Sprintf("evicted after %s idle: the session table was full (MaxSessions=%d) and a new client came", idle.Round(time.Millisecond), b.opts.MaxSessions)
		if victim.endIf(reason, victim.evictableLocked) {
			victim.log.Info("session evicted", "session_id", victim.ID, "idle", idle.Round(time.Millisecond).String(),
				"max_sessions", b.opts.MaxSessions)
		}
		// Ended (now stopping) or busy again: look anew.
	}
}

// longestIdleLocked returns the evictable session unused for longest, and
// for how long. b.mu must be held.
func (b *Bridge) longestIdleLocked() (*Session, time.Duration) {
	var (
		victim *Session
		oldest time.Time
	)
	for _, s := range b.sessions {
		s.mu.Lock()
		if s.evictableLocked() && (victim == nil || s.lastUsed.Before(oldest)) {
			victim, oldest = s, s.lastUsed
		}
		s.mu.Unlock()
	}
	if victim == nil {
		return nil, 0
	}
	return victim, time.Since(oldest)
}

func (b *Bridge) unreserve() {
	b.mu.Lock()
	b.reserved--
	b.mu.Unlock()
}

func newSessionID() string {
	var buf [16]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(buf[:])
}

// startSession starts a child and registers its session. The slot taken by
// reserve is handed to the session. A session that is not legacy takes the
// prestarted child, if there is one (prestart.go).
func (b *Bridge) startSession(ctx context.Context, legacy bool) (*Session, error) {
	var s *Session
	if !legacy {
		var err error
		if s, err = b.takePrestarted(); err != nil {
			b.unreserve()
			b.opts.Metrics.SessionRefused("child_start")
			return nil, err
		}
	}
	if s == nil {
		var err error
		if s, err = b.newChildSession(ctx); err != nil {
			b.unreserve()
			return nil, err
		}
	}
	s.legacy = legacy
	b.mu.Lock()
	b.reserved--
	b.sessions[s.ID] = s
	select {
	case <-s.dead: // ended before it was registered
		delete(b.sessions, s.ID)
	default:
	}
	b.mu.Unlock()
	b.started.Add(1)
	s.log.Info("session start", logevent.SessionStart, "pid", s.proc.Pid(), "group", s.proc.Group().String(), "legacy_sse", legacy, "prestarted", s.first)
	return s, nil
}

// newChildSession starts a child and returns its session, not registered.
func (b *Bridge) newChildSession(ctx context.Context) (*Session, error) {
	id := newSessionID()
	log := b.log.With("session", id[:8])
	if !b.addChild() {
		return nil, errDraining
	}
	proc, err := child.Start(ctx, log, b.opts.Placer, id[:12], b.opts.Spec)
	if err != nil {
		b.children.Done()
		b.opts.Metrics.SessionRefused("child_start")
		log.Warn("child start failed", "err", err)
		return nil, err
	}
	b.live.Add(1)
	b.opts.Metrics.SessionOpened()
	return newSession(id, log, proc, b.opts.Grace, b.opts.StderrLinesPerSecond, b.opts.Metrics, true, func(s *Session) {
		b.mu.Lock()
		delete(b.sessions, s.ID)
		b.stopping++
		b.mu.Unlock()
	}, func(*Session) {
		// Counted gone before its slot is freed: a session started in
		// that slot must never make Children read MaxSessions+1.
		b.live.Add(-1)
		b.mu.Lock()
		b.stopping--
		close(b.slotFreed)
		b.slotFreed = make(chan struct{})
		b.mu.Unlock()
		b.children.Done()
	}), nil
}

// lookup returns a live session.
func (b *Bridge) lookup(id string) *Session {
	b.mu.Lock()
	s := b.sessions[id]
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	select {
	case <-s.dead:
		return nil
	default:
		return s
	}
}

// Stats is a snapshot of the bridge's state.
type Stats struct {
	// Sessions is the number of live client sessions.
	Sessions int
	// SessionsStarted counts sessions since start.
	SessionsStarted int64
	// Inflight is the number of HTTP requests being relayed.
	Inflight int64
	// Children is the number of child processes not yet stopped.
	Children int64
	// Calls counts requests relayed since start.
	Calls    int64
	Draining bool
}

// Stats returns a snapshot.
func (b *Bridge) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Sessions: len(b.sessions), SessionsStarted: b.started.Load(), Inflight: b.inflight.Load(),
		Children: b.live.Load(), Calls: b.calls.Load(), Draining: b.draining}
}

// Probe starts one child, asks it to initialize and stops it again: a
// start-up check that the configured server really speaks MCP.
func (b *Bridge) Probe(ctx context.Context) error {
	sc := &sharedChild{b: b}
	s, _, err := sc.start(ctx)
	if err != nil {
		return fmt.Errorf("probe initialize: %w", err)
	}
	s.end("probe done")
	<-s.Stopped()
	return nil
}

// addChild counts a child that is about to start, so that Shutdown waits
// for it; it reports false once Shutdown has begun waiting, when no child
// may start any more. A child counted must call b.children.Done when it is
// gone, or at once if its start fails.
func (b *Bridge) addChild() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.childrenClosed {
		return false
	}
	b.children.Add(1)
	return true
}

// Draining reports whether Shutdown has begun.
func (b *Bridge) Draining() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draining
}

// Shutdown refuses new sessions, waits for in-flight requests until ctx is
// done, then ends every session and waits for every child to be gone.
func (b *Bridge) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.draining = true
	b.mu.Unlock()
	var err error
	for b.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("drain: %d requests still in flight: %w", b.inflight.Load(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	b.mu.Lock()
	all := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		all = append(all, s)
	}
	b.mu.Unlock()
	for _, s := range all {
		s.end("server shutting down")
	}
	b.endPrestarted()
	b.cancel() // abandons a start of the shared child
	b.shared.shutdown()
	b.mu.Lock()
	b.childrenClosed = true // every child that will ever start is counted
	b.mu.Unlock()
	b.children.Wait()
	return err
}
