package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/egress/relay"
)

// stack is a relay.Relay and a Proxy joined by a real SOCK_SEQPACKET
// socketpair, as the sandbox and the host are.
type stack struct {
	relay     *relay.Relay
	proxy     *Proxy
	rec       *recorder
	relayCtl  *net.UnixConn // the sandbox end, also used to inject raw messages
	proxyAddr string        // relay's CONNECT port, 127.0.0.1:P
	mcpAddr   string        // relay's MCP port, 127.0.0.1:M
	echo      string        // loopback echo target, granted Private
	sink      string        // loopback sink target, granted Private
	mcpServer string        // the host MCP server that 127.0.0.1:M stands for
}

func newStack(tb testing.TB) *stack {
	tb.Helper()
	s := &stack{rec: newRecorder(), echo: echoServer(tb), sink: sinkServer(tb), mcpServer: echoServer(tb)}
	relayCtl, hostCtl := socketPair(tb, unix.SOCK_SEQPACKET)
	s.relayCtl = relayCtl

	proxyLn, mcpLn := listen(tb), listen(tb)
	s.proxyAddr, s.mcpAddr = proxyLn.Addr().String(), mcpLn.Addr().String()
	var allow []Grant
	for _, target := range []string{s.echo, s.sink} {
		g, err := ParseGrant(target, true)
		if err != nil {
			tb.Fatal(err)
		}
		allow = append(allow, g)
	}
	s.proxy = &Proxy{
		Policy: Policy{
			Allow:     allow,
			MCPPorts:  []uint16{portOf(tb, mcpLn.Addr())},
			ProxyPort: portOf(tb, proxyLn.Addr()),
		},
		Resolver: &fakeResolver{},
		Audit:    s.rec.audit,
		Log:      testLogger(tb),
		// The relay's MCP port and the host MCP server cannot share a
		// port number in one network namespace: redirect, after checking
		// that the proxy asked for host loopback at the granted port.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == s.mcpAddr {
				addr = s.mcpServer
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	s.relay = &relay.Relay{Control: relayCtl, Log: testLogger(tb)}

	ctx, cancel := context.WithCancel(context.Background())
	hostDone, relayDone := make(chan error, 1), make(chan error, 1)
	go func() { hostDone <- s.proxy.ServeControl(ctx, hostCtl) }()
	go func() { relayDone <- s.relay.Serve(ctx, []net.Listener{proxyLn, mcpLn}) }()
	tb.Cleanup(func() {
		cancel()
		for name, ch := range map[string]chan error{"ServeControl": hostDone, "Serve": relayDone} {
			select {
			case err := <-ch:
				if err != nil {
					tb.Errorf("%s: %v", name, err)
				}
			case <-time.After(waitTimeout):
				tb.Errorf("%s did not return after cancel", name)
			}
		}
	})
	return s
}

// connect opens a tunnel to target through the relay's CONNECT port.
func (s *stack) connect(tb testing.TB, target string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp4", s.proxyAddr)
	if err != nil {
		tb.Fatalf("dial relay: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	br := bufio.NewReader(c)
	if got := readReply(tb, br); got != 200 {
		tb.Fatalf("CONNECT %s: status %d", target, got)
	}
	_ = c.SetDeadline(time.Time{})
	return c, br
}

func TestStackConnect(t *testing.T) {
	s := newStack(t)
	c, br := s.connect(t, s.echo)
	echoRoundTrip(t, c, br, "hello through relay and proxy")
	c.(*net.TCPConn).CloseWrite()
	expectEOF(t, br, c)
	ev := s.rec.next(t)
	if ev.Kind != KindConnect || ev.Decision != DecisionAllow || ev.Addr != s.echo || ev.BytesUp != 29 || ev.BytesDown != 29 {
		t.Errorf("event %+v", ev)
	}
	if n := s.rec.opened.Load(); n != 1 {
		t.Errorf("%d records at connection open, want 1 (an allowed connection is audited when it opens)", n)
	}
}

func TestStackDenied(t *testing.T) {
	s := newStack(t)
	c, err := net.Dial("tcp4", s.proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	io.WriteString(c, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	if got := readReply(t, br); got != 403 {
		t.Fatalf("status %d, want 403", got)
	}
	expectEOF(t, br, c)
	if ev := s.rec.next(t); ev.Decision != DecisionDeny || ev.Reason != "not in allow list" {
		t.Errorf("event %+v", ev)
	}
}

func TestStackLargeTransfer(t *testing.T) {
	size := 64 << 20
	if testing.Short() {
		size = 4 << 20
	}
	s := newStack(t)
	c, br := s.connect(t, s.echo)
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	rng.Read(data)
	want := sha256.Sum256(data)

	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	h := sha256.New()
	n, err := io.Copy(h, br)
	if err != nil {
		t.Fatalf("read after %d bytes: %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("got %d bytes (sha256 %x), want %d bytes (sha256 %x)", n, h.Sum(nil), size, want)
	}
	ev := s.rec.next(t)
	if ev.BytesUp != int64(size) || ev.BytesDown != int64(size) {
		t.Errorf("event bytes up %d down %d, want %d", ev.BytesUp, ev.BytesDown, size)
	}
}

func TestStackMCP(t *testing.T) {
	s := newStack(t)
	c, err := net.Dial("tcp4", s.mcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoRoundTrip(t, c, c, `{"jsonrpc":"2.0","method":"ping"}`)
	c.(*net.TCPConn).CloseWrite()
	expectEOF(t, c, c)
	ev := s.rec.next(t)
	if ev.Kind != KindMCP || ev.Decision != DecisionAllow || ev.Target != s.mcpAddr {
		t.Errorf("event %+v, want mcp allow %s", ev, s.mcpAddr)
	}
}

func TestStackDNS(t *testing.T) {
	s := newStack(t)
	pc, err := relay.ListenDNSOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.relay.ServeDNS(ctx, pc) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeDNS: %v", err)
		}
	}()

	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))

	// Malformed packets are dropped without a reply or a report.
	c.Write([]byte{0x12})
	c.Write([]byte("not a dns packet at all, definitely"))

	tests := []struct {
		name   string
		qtype  dnsmessage.Type
		target string
	}{
		{"example.com.", dnsmessage.TypeAAAA, "example.com. AAAA"},
		{"Api.Example.COM.", dnsmessage.TypeA, "Api.Example.COM. A"},
		{"weird\x00name.", dnsmessage.Type(4242), `weird\x5c000name. TYPE4242`},
		// A name the agent chose to be code, rendered inert.
		{"$(touch${IFS}x).", dnsmessage.TypeA, `\x24\x28touch\x24\x7bIFS\x7dx\x29. A`},
	}
	for i, tt := range tests {
		id := uint16(0x4000 + i)
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
		b.StartQuestions()
		name, err := dnsmessage.NewName(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		b.Question(dnsmessage.Question{Name: name, Type: tt.qtype, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read reply: %v", err)
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if h.ID != id || !h.Response || h.RCode != dnsmessage.RCodeNameError || !h.RecursionDesired {
			t.Errorf("reply header %+v", h)
		}
		rq, err := p.Question()
		if err != nil || rq.Name.String() != tt.name || rq.Type != tt.qtype {
			t.Errorf("reply question %v, %v", rq, err)
		}
		p.SkipAllQuestions()
		if ans, err := p.AllAnswers(); err != nil || len(ans) != 0 {
			t.Errorf("answers %v, %v", ans, err)
		}
		ev := s.rec.next(t)
		if ev.Kind != KindDNS || ev.Decision != DecisionDeny || ev.Target != tt.target || ev.Reason != dnsDenyReason || ev.Port != 53 {
			t.Errorf("event %+v, want dns deny %q", ev, tt.target)
		}
	}
	s.rec.none(t)
}

// sendRaw sends a raw control message with fds.
func sendRaw(t *testing.T, c *net.UnixConn, msg []byte, fds ...int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(msg, oob, nil); err != nil {
		t.Fatalf("send %q: %v", msg, err)
	}
}

// sendEmpty sends a control message of zero bytes with fds, which
// WriteMsgUnix and unix.Sendmsg cannot (they add a dummy byte).
func sendEmpty(t *testing.T, c *net.UnixConn, fds ...int) {
	t.Helper()
	oob := unix.UnixRights(fds...)
	var msg unix.Msghdr
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
	}); err != nil {
		t.Fatal(err)
	}
	if errno != 0 {
		t.Fatalf("sendmsg: %v", errno)
	}
}

// probe is a stream socketpair: fd goes to the host, peer tells us
// whether the host closed every copy of it.
type probe struct {
	fd   int
	peer *net.UnixConn
}

func newProbe(t *testing.T) probe {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := fdConn(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return probe{fds[0], peer.(*net.UnixConn)}
}

// closedByHost closes our copy of the probe fd and checks that the peer
// sees end of file, that is, the host kept no copy open.
func (p probe) closedByHost(t *testing.T) {
	t.Helper()
	unix.Close(p.fd)
	p.peer.SetReadDeadline(time.Now().Add(waitTimeout))
	if n, err := p.peer.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("probe read = %d, %v; want EOF (host leaked the fd)", n, err)
	}
}

func TestStackMalformedControl(t *testing.T) {
	s := newStack(t)
	port := portOf(t, &net.TCPAddr{Port: 9})
	conn := []byte{relay.MsgConn, 0, byte(port)}
	name := []byte("D\x00\x01example.com.")

	pipeR, pipeW, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipeW)
	seqA, _ := socketPair(t, unix.SOCK_SEQPACKET)
	seqFD, err := dupFD(seqA)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		msg    []byte
		probes int   // fresh probes passed as fds
		extra  []int // other fds passed
		reason string
	}{
		{name: "conn without fd", msg: conn, reason: "'C' message with 0 fds"},
		{name: "conn with two fds", msg: conn, probes: 2, reason: "'C' message with 2 fds"},
		{name: "short conn", msg: conn[:2], probes: 1, reason: "'C' message of 2 bytes"},
		{name: "long conn", msg: append(conn, 0), probes: 1, reason: "'C' message of 4 bytes"},
		{name: "conn with a pipe", msg: conn, extra: []int{pipeR}, reason: "not a socket"},
		{name: "conn with a seqpacket socket", msg: conn, extra: []int{seqFD}, reason: "not a stream socket"},
		{name: "too many fds", msg: conn, probes: maxControlFDs + 2, reason: "more than"},
		{name: "unknown type", msg: []byte("X\x00\x01"), probes: 1, reason: "unknown message type X"},
		{name: "dns with fd", msg: name, probes: 1, reason: "'D' message with 1 fds"},
		{name: "short dns", msg: []byte("D\x00\x01"), reason: "'D' message of 3 bytes"},
		{name: "dns with control bytes", msg: []byte("D\x00\x01exa\nmple."), reason: "not printable"},
		{name: "dns name too long", msg: append([]byte("D\x00\x01"), bytes.Repeat([]byte("a"), 256)...), reason: "want 4 to 258"},
		{name: "too long", msg: bytes.Repeat([]byte("D"), 2000), reason: "message longer than"},
		{name: "empty with fd", msg: nil, probes: 1, reason: "empty message"},
		{name: "dummy byte with fd", msg: []byte{}, probes: 1, reason: `unknown message type \x00`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var probes []probe
			fds := append([]int(nil), tt.extra...)
			for range tt.probes {
				p := newProbe(t)
				probes = append(probes, p)
				fds = append(fds, p.fd)
			}
			if tt.msg == nil {
				sendEmpty(t, s.relayCtl, fds...)
			} else {
				sendRaw(t, s.relayCtl, tt.msg, fds...)
			}
			ev := s.rec.next(t)
			if ev.Kind != KindControl || ev.Decision != DecisionDeny || !strings.Contains(ev.Reason, tt.reason) {
				t.Errorf("event %+v, want control deny containing %q", ev, tt.reason)
			}
			for _, p := range probes {
				p.closedByHost(t)
			}
		})
	}

	// A well-formed 'C' for a port that is not granted, sent by hand.
	p := newProbe(t)
	sendRaw(t, s.relayCtl, conn, p.fd)
	if ev := s.rec.next(t); ev.Reason != "port not granted" || ev.Port != 9 {
		t.Errorf("event %+v", ev)
	}
	p.closedByHost(t)

	// A well-formed 'D' sent by hand.
	sendRaw(t, s.relayCtl, name)
	if ev := s.rec.next(t); ev.Kind != KindDNS || ev.Target != "example.com. A" {
		t.Errorf("event %+v", ev)
	}

	// The control loop survived all that.
	c, br := s.connect(t, s.echo)
	echoRoundTrip(t, c, br, "still works")
}

func TestStackConcurrent(t *testing.T) {
	s := newStack(t)
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- func() error {
				c, err := net.Dial("tcp4", s.proxyAddr)
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(waitTimeout))
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", s.echo)
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200 ") {
					return fmt.Errorf("status line %q, %v", line, err)
				}
				br.ReadString('\n')
				msg := fmt.Sprintf("connection %d", i)
				io.WriteString(c, msg)
				buf := make([]byte, len(msg))
				if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
					return fmt.Errorf("echo %q, %v", buf, err)
				}
				return nil
			}()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for range n {
		if ev := s.rec.next(t); ev.Decision != DecisionAllow {
			t.Errorf("event %+v", ev)
		}
	}
}

func TestControlMustBeSeqpacket(t *testing.T) {
	a, _ := socketPair(t, unix.SOCK_STREAM)
	p := &Proxy{}
	if err := p.ServeControl(context.Background(), a); err == nil {
		t.Error("ServeControl on a stream socket succeeded")
	}
}

func TestServeControlEOF(t *testing.T) {
	relayCtl, hostCtl := socketPair(t, unix.SOCK_SEQPACKET)
	rec := newRecorder()
	target := echoServer(t)
	g, _ := ParseGrant(target, true)
	p := &Proxy{Policy: Policy{Allow: []Grant{g}, ProxyPort: 1}, Audit: rec.audit}
	done := make(chan error, 1)
	go func() { done <- p.ServeControl(context.Background(), hostCtl) }()

	// Hand over one connection, then close the control socket: ServeControl
	// must wait for the connection to end.
	pr := newProbe(t)
	sendRaw(t, relayCtl, []byte{relay.MsgConn, 0, 1}, pr.fd)
	unix.Close(pr.fd)
	relayCtl.Close()
	pr.peer.SetDeadline(time.Now().Add(waitTimeout))
	fmt.Fprintf(pr.peer, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	br := bufio.NewReader(pr.peer)
	if got := readReply(t, br); got != 200 {
		t.Fatalf("status %d", got)
	}
	select {
	case err := <-done:
		t.Fatalf("ServeControl returned %v with a connection in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	echoRoundTrip(t, pr.peer, br, "in flight")
	pr.peer.CloseWrite()
	expectEOF(t, br, pr.peer)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeControl = %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("ServeControl did not return at end of file")
	}
	if ev := rec.next(t); ev.Decision != DecisionAllow {
		t.Errorf("event %+v", ev)
	}
}

// pipe returns a pipe's read and write fds.
func pipe() (int, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, 0, err
	}
	return p[0], p[1], nil
}

// dupFD returns a duplicate of c's fd.
func dupFD(c *net.UnixConn) (int, error) {
	f, err := c.File()
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return unix.Dup(int(f.Fd()))
}
