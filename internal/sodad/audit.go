package sodad

import (
	"encoding/json"
	"sync"

	"github.com/soda-project/soda/internal/sandbox"
)

// auditRing keeps a sandbox's latest audit records as JSON lines, at most
// max of them, each with its sequence number (the ReadAudit cursor).
type auditRing struct {
	mu   sync.Mutex
	max  int
	recs []auditLine // oldest first
}

type auditLine struct {
	seq  uint64
	json string
}

func newAuditRing(max int) *auditRing { return &auditRing{max: max} }

// add keeps r, dropping the oldest record when full.
func (a *auditRing) add(r sandbox.Record) {
	data, err := json.Marshal(r)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.recs) >= a.max {
		n := copy(a.recs, a.recs[1:])
		a.recs = a.recs[:n]
	}
	a.recs = append(a.recs, auditLine{seq: r.Seq, json: string(data)})
}

// read returns up to max records whose sequence number is at least cursor
// (0: from the oldest kept) and the cursor of the next record.
func (a *auditRing) read(cursor uint64, max int) ([]string, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []string{}
	next := cursor
	for _, l := range a.recs {
		if l.seq < cursor {
			continue
		}
		if len(out) >= max {
			break
		}
		out = append(out, l.json)
		next = l.seq + 1
	}
	if len(out) == 0 && len(a.recs) > 0 && cursor == 0 {
		next = a.recs[0].seq
	}
	return out, next
}
