package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Each direction of a pump copies through a buffer that starts small, so
// that the many short-lived, chatty connections cost little memory, and
// doubles up to the maximum while reads keep filling it.
const (
	copyBufferStart = 4 << 10
	copyBufferMax   = 64 << 10
)

// pumpResult is how a pump ended.
type pumpResult struct {
	aToB, bToA int64 // bytes written each way
	idle       bool  // ended by the idle timeout
}

// duplex is the state one pump shares between its goroutines.
type duplex struct {
	a, b      net.Conn
	start     time.Time
	last      atomic.Int64 // time since start of the last activity, in ns
	abortOnce sync.Once
}

// pump copies bytes both ways between a and b until both directions have
// ended. End of file in one direction is passed on with CloseWrite (or
// Close, for a conn without it) and the other direction goes on; any
// other error, ctx being done, or idle passing with no byte moving either
// way (idle > 0) ends both. pump does not close a or b but leaves them
// with a deadline in the past when it aborted.
func pump(ctx context.Context, a, b net.Conn, idle time.Duration) pumpResult {
	d := &duplex{a: a, b: b, start: time.Now()}
	stop := context.AfterFunc(ctx, d.abort)
	defer stop()
	var res pumpResult
	var wg sync.WaitGroup
	wg.Go(func() { res.aToB = d.copy(b, a) })
	wg.Go(func() { res.bToA = d.copy(a, b) })
	if idle <= 0 {
		wg.Wait()
		return res
	}
	done := make(chan struct{})
	idled := make(chan bool, 1)
	go func() { idled <- d.watch(idle, done) }()
	wg.Wait()
	close(done)
	res.idle = <-idled
	return res
}

// abort makes every pending and future read and write on both conns fail.
func (d *duplex) abort() {
	d.abortOnce.Do(func() {
		past := time.Unix(1, 0)
		_ = d.a.SetDeadline(past)
		_ = d.b.SetDeadline(past)
	})
}

// touch records activity.
func (d *duplex) touch() { d.last.Store(int64(time.Since(d.start))) }

// watch aborts the pump once idle has passed without activity and reports
// whether it did; it returns false when done is closed first.
func (d *duplex) watch(idle time.Duration, done <-chan struct{}) bool {
	progress := tcpProgress(d.a) + tcpProgress(d.b)
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-done:
			return false
		case <-t.C:
			if p := tcpProgress(d.a) + tcpProgress(d.b); p != progress {
				progress = p
				d.touch()
			}
			quiet := time.Since(d.start) - time.Duration(d.last.Load())
			if quiet >= idle {
				d.abort()
				return true
			}
			t.Reset(idle - quiet)
		}
	}
}

// copy copies src to dst and returns the number of bytes written.
func (d *duplex) copy(dst, src net.Conn) int64 {
	if canSplice(dst, src) {
		// The kernel moves the bytes (splice(2) through a pipe); the idle
		// watch sees the activity in the TCP counters instead.
		n, err := io.Copy(dst, src)
		if err != nil {
			d.abort()
			return n
		}
		closeWrite(dst)
		return n
	}
	buf := make([]byte, copyBufferStart)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			d.touch()
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				d.abort()
				return n
			}
			d.touch()
			if nr == len(buf) && len(buf) < copyBufferMax {
				buf = make([]byte, 2*len(buf))
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				closeWrite(dst)
			} else {
				d.abort()
			}
			return n
		}
	}
}

// closeWrite shuts down the writing side of c, or closes c if it cannot.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// canSplice reports whether io.Copy(dst, src) moves the bytes with
// splice(2), without copying them through user space: Go does so from a
// TCP or Unix stream socket into a TCP socket, and from a TCP socket into
// a Unix stream socket.
func canSplice(dst, src net.Conn) bool {
	switch src.(type) {
	case *net.TCPConn:
		switch dst.(type) {
		case *net.TCPConn, *net.UnixConn:
			return true
		}
	case *net.UnixConn:
		_, ok := dst.(*net.TCPConn)
		return ok
	}
	return false
}

// tcpProgress returns a number that grows whenever bytes move on c, a TCP
// connection (bytes received plus bytes acknowledged, from TCP_INFO); 0
// for other connections.
func tcpProgress(c net.Conn) uint64 {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint64
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = info.Bytes_received + info.Bytes_acked
		}
	})
	return n
}
