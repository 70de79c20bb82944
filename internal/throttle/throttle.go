// Package throttle keeps a log from flooding: it lets events through at a
// steady rate (golang.org/x/time/rate) and counts the ones it holds back,
// so that the log can say how many it left out, once, with their number.
package throttle

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// reportEvery is how often, at most, Allow hands out the number of events
// held back: a flood then costs one summary line a second, not one per
// event let through.
const reportEvery = time.Second

// Throttle lets perSecond events a second through, in bursts of as many,
// and counts the rest. It is safe for concurrent use.
type Throttle struct {
	lim *rate.Limiter

	mu       sync.Mutex
	held     int       // events held back and not reported yet
	reported time.Time // when held was last handed out
}

// New returns a Throttle letting perSecond events a second through
// (perSecond < 1 is taken as 1).
func New(perSecond int) *Throttle {
	perSecond = max(perSecond, 1)
	return &Throttle{lim: rate.NewLimiter(rate.Limit(perSecond), perSecond)}
}

// Allow reports whether an event at now may go through. When it may, held
// is the number of events held back since they were last reported, or 0:
// it is handed out at most once a second, and each held event is counted
// in exactly one report (Allow's or Flush's).
func (t *Throttle) Allow(now time.Time) (ok bool, held int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.lim.AllowN(now, 1) {
		t.held++
		return false, 0
	}
	if t.held > 0 && now.Sub(t.reported) >= reportEvery {
		held, t.held, t.reported = t.held, 0, now
	}
	return true, held
}

// Flush returns the number of events held back and not reported yet, and
// forgets them; for a final summary when no event is coming to carry it.
func (t *Throttle) Flush() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.held
	t.held = 0
	return held
}
