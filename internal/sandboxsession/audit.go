package sandboxsession

import (
	"sync"
	"time"
)

// Event is one audit record of a session: what its sandbox did or was
// refused.
type Event struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Kind: create, seed, write, exec, exit, timeout, refused, quota,
	// reset, egress, close, expire.
	Kind   string `json:"kind"`
	Call   string `json:"call,omitempty"` // the tool
	Detail string `json:"detail,omitempty"`
	// Argv and Code are an exec's.
	Argv []string `json:"argv,omitempty"`
	Code *int     `json:"code,omitempty"`
	// Target and Decision are an egress attempt's.
	Target   string `json:"target,omitempty"`
	Decision string `json:"decision,omitempty"`
}

// auditLog keeps a session's latest events (at most max), numbered from 1;
// the cursor of a read is the next number to read.
type auditLog struct {
	mu   sync.Mutex
	max  int
	next uint64
	evs  []Event
}

func (a *auditLog) add(e Event) Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	e.Seq = a.next
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if len(a.evs) >= a.max {
		a.evs = append(a.evs[:0], a.evs[1:]...)
	}
	a.evs = append(a.evs, e)
	return e
}

// read returns up to n events from cursor on (0: the oldest kept), the
// cursor to read next, and whether older ones were dropped before cursor.
func (a *auditLog) read(cursor uint64, n int) ([]Event, uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []Event{}
	dropped := len(a.evs) > 0 && cursor < a.evs[0].Seq && cursor > 0
	for _, e := range a.evs {
		if e.Seq >= cursor && len(out) < n {
			out = append(out, e)
		}
	}
	next := cursor
	if len(out) > 0 {
		next = out[len(out)-1].Seq + 1
	} else if cursor == 0 {
		next = a.next + 1
	}
	return out, next, dropped
}
