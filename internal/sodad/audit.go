package sodad

import (
	"encoding/json"
	"sync"

	"github.com/soda-project/soda/internal/sandbox"
)

// auditRing keeps a sandbox's latest audit records as JSON lines, at most
// max of them and auditKeepBytes of JSON, each with its sequence number
// (the ReadAudit cursor).
type auditRing struct {
	mu    sync.Mutex
	max   int
	bytes int
	recs  []auditLine // oldest first
}

// auditKeepBytes bounds what one sandbox's kept records take (256 sandboxes
// at most: 512 MiB in all at worst, in practice far less).
const auditKeepBytes = 2 << 20

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
	drop := 0
	for drop < len(a.recs) && (len(a.recs)-drop >= a.max || a.bytes+len(data) > auditKeepBytes) {
		a.bytes -= len(a.recs[drop].json)
		drop++
	}
	if drop > 0 {
		n := copy(a.recs, a.recs[drop:])
		clear(a.recs[n:])
		a.recs = a.recs[:n]
	}
	a.recs = append(a.recs, auditLine{seq: r.Seq, json: string(data)})
	a.bytes += len(data)
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
