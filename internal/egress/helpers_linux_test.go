package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitTimeout bounds every wait in the tests.
const waitTimeout = 10 * time.Second

func testLogger(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// socketPair returns both ends of a Unix socketpair of type typ as conns;
// they are closed when the test ends.
func socketPair(tb testing.TB, typ int) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		c, err := fdConn(fd)
		if err != nil {
			tb.Fatalf("fd conn: %v", err)
		}
		conns[i] = c.(*net.UnixConn)
		tb.Cleanup(func() { _ = c.Close() })
	}
	return conns[0], conns[1]
}

// listen listens on 127.0.0.1:0 until the test ends.
func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	return ln
}

func portOf(tb testing.TB, a net.Addr) uint16 {
	tb.Helper()
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		tb.Fatalf("%v is not a TCP address", a)
	}
	return uint16(ta.Port)
}

// serve runs handle for every connection accepted on a fresh loopback
// listener until the test ends and returns the listener's address.
func serve(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	ln := listen(tb)
	var wg sync.WaitGroup
	tb.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

// echoServer echoes every byte back and half-closes at end of file.
func echoServer(tb testing.TB) string {
	return serve(tb, func(c net.Conn) {
		_, _ = io.Copy(c, c)
		closeWrite(c)
		_, _ = io.Copy(io.Discard, c)
	})
}

// sinkServer reads until end of file and then writes the byte count as a
// decimal line.
func sinkServer(tb testing.TB) string {
	return serve(tb, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%d\n", n)
	})
}

// fakeResolver answers from a map and counts lookups.
type fakeResolver struct {
	names map[string][]netip.Addr
	calls atomic.Int64
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	if network != "ip" {
		return nil, fmt.Errorf("fake resolver: network %q", network)
	}
	addrs, ok := r.names[strings.TrimSuffix(host, ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// recorder collects audit events.
type recorder struct {
	ch     chan Event
	opened atomic.Int64 // "connected" records of allowed connections
}

func newRecorder() *recorder { return &recorder{ch: make(chan Event, 4096)} }

// audit records ev; when the buffer is full (benchmarks) it drops it. The
// record an allowed connection gets when it opens is counted, not
// queued: the tests look at the final record of each attempt.
func (r *recorder) audit(ev Event) {
	if ev.Decision == DecisionAllow && ev.Reason == "connected" {
		r.opened.Add(1)
		return
	}
	select {
	case r.ch <- ev:
	default:
	}
}

// next returns the next event.
func (r *recorder) next(tb testing.TB) Event {
	tb.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(waitTimeout):
		tb.Fatal("no audit event")
		return Event{}
	}
}

// none checks that no event arrives for a short while.
func (r *recorder) none(tb testing.TB) {
	tb.Helper()
	select {
	case ev := <-r.ch:
		tb.Fatalf("unexpected event %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

// readReply reads an HTTP response header from br and returns its status.
func readReply(tb testing.TB, br *bufio.Reader) int {
	tb.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		tb.Fatalf("read status line: %v (got %q)", err, line)
	}
	parts := strings.SplitN(line, " ", 3)
	if len(parts) < 3 || parts[0] != "HTTP/1.1" {
		tb.Fatalf("bad status line %q", line)
	}
	code, err := strconv.Atoi(parts[1])
	if err != nil {
		tb.Fatalf("bad status line %q", line)
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			tb.Fatalf("read header: %v", err)
		}
		if h == "\r\n" {
			return code
		}
	}
}

// expectEOF checks that c is closed by the peer (end of file or reset)
// within waitTimeout, reading whatever comes first.
func expectEOF(tb testing.TB, r io.Reader, c net.Conn) {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		tb.Fatalf("connection still open after %v", waitTimeout)
	}
}

// echoRoundTrip writes msg to c and expects it back.
func echoRoundTrip(tb testing.TB, c net.Conn, r io.Reader, msg string) {
	tb.Helper()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(c, msg); err != nil {
		tb.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(r, buf); err != nil {
		tb.Fatalf("read echo: %v", err)
	}
	if string(buf) != msg {
		tb.Fatalf("echo = %q, want %q", buf, msg)
	}
	_ = c.SetDeadline(time.Time{})
}

// unixStream is the socket type of relayed connections.
const unixStream = unix.SOCK_STREAM
