package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// prestart is a child started before any client comes (Prestart), which
// the first session that is not legacy SSE takes, its start-up already
// done. Its outcome is the server's start-up check, reported once on
// FirstStart: the answer to that session's initialize, or the child's
// failure to start, or its exit before any session took it. sodactl run
// starts an agent's own servers so, their start-up overlapping the
// sandbox's and the agent's, instead of starting each twice (a probe, then
// the agent's session).
type prestart struct {
	mu    sync.Mutex
	s     *Session      // the child's session, not registered until taken
	err   error         // why the child did not start
	ready chan struct{} // closed once s or err is set
	taken bool
	// expired says the child was ended for idleness (IdleTimeout with no
	// session to take it): not a failure.
	expired bool
	started time.Time

	once   sync.Once
	result chan error // buffered: FirstStart
}

// Prestart starts one child now, in the background, for the next session
// to take, and reports how its start-up ended on FirstStart. Call it at
// most once, before Shutdown.
func (b *Bridge) Prestart() {
	p := &prestart{ready: make(chan struct{}), result: make(chan error, 1), started: time.Now()}
	b.mu.Lock()
	b.pre = p
	b.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.StartTimeout)
		defer cancel()
		s, err := b.newChildSession(ctx)
		if s != nil {
			s.first = true
		}
		p.mu.Lock()
		p.s, p.err = s, err
		p.mu.Unlock()
		close(p.ready)
		if err != nil {
			p.report(err)
			return
		}
		if b.Draining() { // Shutdown may have looked before s was set
			b.endPrestarted()
		}
		// A child that exits before any session took it failed its start,
		// unless Shutdown ended it.
		<-s.dead
		p.mu.Lock()
		taken, expired := p.taken, p.expired
		p.mu.Unlock()
		if !taken && !expired && !b.Draining() {
			p.report(errors.New(s.goneMessageAfterExit()))
		}
	}()
}

// FirstStart reports, once, how the prestarted child's start-up ended: nil
// when a session's initialize was answered, else why it was not. Nothing
// is reported for a child that Shutdown ended untaken. It is nil without
// Prestart.
func (b *Bridge) FirstStart() <-chan error {
	if p := b.prestarted(); p != nil {
		return p.result
	}
	return nil
}

// prestarted is the child Prestart started, nil without one.
func (b *Bridge) prestarted() *prestart {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pre
}

func (p *prestart) report(err error) {
	p.once.Do(func() { p.result <- err })
}

// takePrestarted hands the prestarted child's session to a new client:
// nil, nil when there is none (none started, or taken already); an error
// when it did not start or has exited, which is then reported.
func (b *Bridge) takePrestarted() (*Session, error) {
	p := b.prestarted()
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	if p.taken || p.expired {
		p.mu.Unlock()
		return nil, nil
	}
	p.taken = true
	p.mu.Unlock()
	<-p.ready // bounded by StartTimeout
	if p.err != nil {
		return nil, p.err
	}
	select {
	case <-p.s.dead:
		err := errors.New(p.s.goneMessageAfterExit())
		p.report(err)
		return nil, err
	default:
	}
	return p.s, nil
}

// reportFirst reports the outcome of the prestarted child's initialize,
// once the relay of a session that took it is done.
func (b *Bridge) reportFirst(s *Session) {
	p := b.prestarted()
	if s.ProtocolVersion() != "" {
		p.report(nil)
		return
	}
	select {
	case <-s.dead:
		p.report(errors.New("initialize: " + s.goneMessageAfterExit()))
	default:
		p.report(errors.New("initialize: " + s.goneMessage()))
	}
}

// expirePrestarted ends the prestarted child once it has waited
// IdleTimeout with no session to take it, as an idle session's child is
// ended: a server the agent never uses costs the host nothing after
// that. Nothing is reported (its start-up was not checked).
func (b *Bridge) expirePrestarted(now time.Time) {
	b.endUntaken(fmt.Sprintf("no session took it within %s", b.opts.IdleTimeout), func(p *prestart) bool {
		return now.Sub(p.started) > b.opts.IdleTimeout
	})
}

// endPrestarted ends the prestarted child if no session took it.
func (b *Bridge) endPrestarted() {
	b.endUntaken("server shutting down", func(*prestart) bool { return true })
}

// endUntaken ends the prestarted child, for reason, if it started, no
// session took it, and due says so (called under p.mu); it is then marked
// expired, so that no session takes it and its exit is no failure.
func (b *Bridge) endUntaken(reason string, due func(p *prestart) bool) {
	p := b.prestarted()
	if p == nil {
		return
	}
	p.mu.Lock()
	s := p.s
	end := s != nil && !p.taken && !p.expired && due(p)
	if end {
		p.expired = true
	}
	p.mu.Unlock()
	if end {
		s.log.Info("prestarted child ended", "reason", reason)
		s.end(reason)
	}
}

// PrestartGone says whether the prestarted child failed to start or exited
// before any session took it: its failure is reported on FirstStart, or
// about to be (its stderr is being read to its end).
func (b *Bridge) PrestartGone() bool {
	p := b.prestarted()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return true
	}
	if p.s == nil || p.taken {
		return false
	}
	select {
	case <-p.s.dead:
		return true
	default:
		return false
	}
}
