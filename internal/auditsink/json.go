package auditsink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/sandbox"
)

// DefaultJSONMax is how many bytes a JSON sink writes at most before it
// leaves out egress records (a flood of denied connections wrote 18 MB in
// 15 s when there was no cap).
const DefaultJSONMax = 64 << 20

// JSON writes records as JSON lines; it is safe for concurrent use. Once
// it has written its cap, it leaves out egress records (every other record
// is still written: there are few) and Close writes a "dropped" record
// saying how many, with their sequence numbers.
type JSON struct {
	mu      sync.Mutex
	w       io.Writer
	buf     bytes.Buffer
	max     int64
	written int64
	dropped struct {
		n           int
		first, last uint64
		sandbox     string
	}
}

// NewJSON returns a sink writing JSON lines to w, at most max bytes of
// them (0 or less: DefaultJSONMax) before egress records are left out.
func NewJSON(w io.Writer, max int64) *JSON {
	if max <= 0 {
		max = DefaultJSONMax
	}
	return &JSON{w: w, max: max}
}

// Write appends one record. A failed write is not retried: the trail has
// no one to report it to while the sandbox runs.
func (a *JSON) Write(r sandbox.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf.Reset()
	if err := json.NewEncoder(&a.buf).Encode(r); err != nil {
		return
	}
	if r.Event == "egress" && a.written+int64(a.buf.Len()) > a.max {
		d := &a.dropped
		if d.n == 0 {
			d.first, d.sandbox = r.Seq, r.Sandbox
		}
		d.n++
		d.last = r.Seq
		return
	}
	n, _ := a.w.Write(a.buf.Bytes())
	a.written += int64(n)
}

// Close writes the summary of what was left out, if anything was; it does
// not close the writer.
func (a *JSON) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, max := a.dropped, a.max
	if d.n == 0 {
		return nil
	}
	a.buf.Reset()
	if err := json.NewEncoder(&a.buf).Encode(sandbox.Record{Time: time.Now(), Sandbox: d.sandbox, Event: "dropped",
		Detail: fmt.Sprintf("%d egress records (seq %d to %d) left out after this file's cap of %d bytes", d.n, d.first, d.last, max)}); err != nil {
		return fmt.Errorf("audit summary: %w", err)
	}
	if _, err := a.w.Write(a.buf.Bytes()); err != nil {
		return fmt.Errorf("write the audit summary: %w", err)
	}
	return nil
}
