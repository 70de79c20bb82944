package httpfront

import "sync"

// headerScan measures the request line and headers of each request on a
// connection as the bytes arrive from the network, so that MaxHeaderBytes is
// enforced to the byte. net/http alone cannot do that: it allows 4096 bytes
// of slack, and on a kept connection it reads up to 4096 more bytes of the
// next request before it starts counting.
//
// A scan starts with the connection and again when it goes idle after a
// response; leading CR and LF bytes are skipped, as net/http does, and the
// request ends at the first empty line. Bytes a client pipelines (sends
// before the previous response ended) reach net/http's buffer before the
// scan restarts, so such a request is held only to net/http's own, looser
// bound; no client in use pipelines.
type headerScan struct {
	limit int // 0: no limit

	mu        sync.Mutex // net/http's background read may feed the scan
	started   bool       // past leading CR and LF
	done      bool       // the empty line was seen
	over      bool       // more than limit bytes without an empty line
	n         int        // bytes of this request so far
	lineEmpty bool       // no byte but CR on the current line yet
	early     bool       // restarted by next(): the coming reset is already done
}

// reset starts measuring the next request, when the connection goes idle
// after a response; a restart by next for the same request stands.
func (h *headerScan) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.early {
		h.early = false
		return
	}
	h.started, h.done, h.over, h.n, h.lineEmpty = false, false, false, 0, false
}

// next is called before the bytes of a one-byte read. Once a request's
// body has been read, net/http reads one byte ahead in the background to
// notice a client that goes away; a byte it gets there is the first of the
// next request, and it can arrive before the connection is marked idle
// (the client sends as soon as it has the response). Counting starts with
// it, so that such a request is held to the limit to the byte too.
func (h *headerScan) next() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		h.started, h.done, h.over, h.n, h.lineEmpty = false, false, false, 0, false
		h.early = true
	}
}

// feed scans bytes read from the connection.
func (h *headerScan) feed(p []byte) {
	if h.limit <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range p {
		if h.done || h.over {
			return
		}
		if !h.started {
			if b == '\r' || b == '\n' {
				continue
			}
			h.started = true
		}
		h.n++
		switch b {
		case '\n':
			if h.lineEmpty {
				h.done = true
			}
			h.lineEmpty = true
		case '\r':
		default:
			h.lineEmpty = false
		}
		if !h.done && h.n >= h.limit {
			// The limit is reached without the empty line: one more
			// byte of headers is too many, and the empty line itself
			// cannot fit in zero bytes.
			h.over = true
		}
	}
}

// tooLarge reports whether the current request's line and headers exceeded
// the limit.
func (h *headerScan) tooLarge() bool {
	if h.limit <= 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.over
}

// complete reports whether the current request's headers have all been
// read.
func (h *headerScan) complete() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}
