package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// dnsBufferSize is the largest DNS query read; longer ones are truncated,
// which does not matter as only the header and first question are parsed.
const dnsBufferSize = 4096

// Relay is the sandbox side: it hands every TCP connection accepted on its
// listeners to the host over Control, and answers DNS queries NXDOMAIN
// while reporting them. It decides nothing and keeps no connection (the
// host caps and audits them). Set its
// fields before the first call and do not change or copy it afterwards;
// its methods are safe for concurrent use.
type Relay struct {
	// Control is the sandbox end of the SOCK_SEQPACKET control socket.
	Control *net.UnixConn
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger

	mu sync.Mutex // serialises sends on Control
}

func (r *Relay) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// checkControl checks that Control is set and is a SOCK_SEQPACKET socket.
func (r *Relay) checkControl() error {
	if r.Control == nil {
		return errors.New("relay: no control socket")
	}
	if err := CheckSockType(r.Control, unix.SOCK_SEQPACKET); err != nil {
		return fmt.Errorf("relay: control socket: %w", err)
	}
	return nil
}

// Listen listens on 127.0.0.1:port (IPv4 only) for each port. On error it
// closes the listeners it opened; the error names the port.
func Listen(ports []uint16) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(ports))
	for _, port := range ports {
		if port == 0 {
			closeListeners(lns)
			return nil, errors.New("listen on port 0: a relay port must be fixed")
		}
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port).String()
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			closeListeners(lns)
			return nil, fmt.Errorf("listen on port %d: %w", port, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeListeners(lns []net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

// Serve accepts connections on lns, which must be TCP listeners, until ctx
// is done or a listener fails, and relays each one: it sets TCP_NODELAY
// and sends 'C', the port the connection was accepted on and a duplicate
// of the connection's socket on Control, then closes its own copy. A
// connection whose announcement cannot be sent is closed. Serve closes
// lns. It returns nil when ctx is done and the listener's error otherwise.
func (r *Relay) Serve(ctx context.Context, lns []net.Listener) error {
	ports := make([]uint16, len(lns))
	for i, ln := range lns {
		ta, ok := ln.Addr().(*net.TCPAddr)
		if !ok || ta.Port <= 0 || ta.Port > 65535 {
			closeListeners(lns)
			return fmt.Errorf("relay: listener on %s is not TCP", ln.Addr())
		}
		ports[i] = uint16(ta.Port)
	}
	if err := r.checkControl(); err != nil {
		closeListeners(lns)
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(ctx, func() { closeListeners(lns) })

	var loops sync.WaitGroup
	var once sync.Once
	var first error
	for i, ln := range lns {
		loops.Go(func() {
			if err := r.acceptLoop(ctx, ln, ports[i]); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	loops.Wait()
	closeListeners(lns)
	return first
}

// acceptLoop accepts connections on ln until ctx is done (nil) or ln fails.
// Handing a connection over is one dup and one sendmsg, so it is done in
// the loop: a host that reads the control socket slowly slows accepting
// down, and the kernel's listen backlog holds the rest.
func (r *Relay) acceptLoop(ctx context.Context, ln net.Listener, port uint16) error {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept on port %d: %w", port, err)
			}
			// Out of fds or memory, or an aborted handshake: wait a
			// little and go on, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			r.log().Warn("relay: accept", "port", port, "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		r.handle(c, port)
	}
}

// handle relays one accepted connection and closes it.
func (r *Relay) handle(c net.Conn, port uint16) {
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	// The connection itself goes to the host: a duplicate of its socket,
	// passed over the control socket. The relay copies no byte; the host
	// reads and writes the agent's connection directly.
	raw, err := tc.SyscallConn()
	if err != nil {
		r.log().Warn("relay: connection fd", "port", port, "err", err)
		return
	}
	fd := -1
	cerr := raw.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if cerr != nil || err != nil {
		r.log().Warn("relay: duplicate connection", "port", port, "err", errors.Join(cerr, err))
		return
	}
	err = r.send([]byte{MsgConn, byte(port >> 8), byte(port)}, fd)
	_ = unix.Close(fd)
	if err != nil {
		r.log().Warn("relay: hand connection to host", "port", port, "err", err)
	}
}

// send sends one control message, with fd in SCM_RIGHTS unless fd < 0.
func (r *Relay) send(msg []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, oobn, err := r.Control.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("send %q control message: %w", msg[0], err)
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("send %q control message: short write (%d of %d bytes, %d of %d ancillary)",
			msg[0], n, len(msg), oobn, len(oob))
	}
	return nil
}

// ListenDNS listens on UDP 127.0.0.1:53 for ServeDNS.
func ListenDNS() (net.PacketConn, error) {
	return ListenDNSOn("127.0.0.1:53")
}

// ListenDNSOn listens on UDP (IPv4) addr for ServeDNS.
func ListenDNSOn(addr string) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for dns on %s: %w", addr, err)
	}
	return pc, nil
}

// ServeDNS answers every DNS query on pc with NXDOMAIN (same id, the first
// question echoed, no answers) and reports it to the host with a 'D'
// message. Packets that are not a well-formed query are dropped. ServeDNS
// closes pc and returns nil when ctx is done; it returns an error if pc
// fails otherwise.
func (r *Relay) ServeDNS(ctx context.Context, pc net.PacketConn) error {
	defer pc.Close()
	if err := r.checkControl(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()
	buf := make([]byte, dnsBufferSize)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("read dns query: %w", err)
			}
			r.log().Warn("relay: read dns query", "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		resp, q, err := answerDNS(buf[:n])
		if err != nil {
			r.log().Debug("relay: dropping dns packet", "from", from, "err", err)
			continue
		}
		if _, err := pc.WriteTo(resp, from); err != nil {
			r.log().Debug("relay: write dns reply", "to", from, "err", err)
		}
		msg := append([]byte{MsgDNS, byte(q.Type >> 8), byte(q.Type)}, queryName(q.Name)...)
		if err := r.send(msg, -1); err != nil {
			r.log().Warn("relay: report dns query", "err", err)
		}
	}
}

// answerDNS parses the header and first question of the query q and
// builds the NXDOMAIN reply.
func answerDNS(q []byte) ([]byte, dnsmessage.Question, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, dnsmessage.Question{}, fmt.Errorf("parse dns header: %w", err)
	}
	if h.Response {
		return nil, dnsmessage.Question{}, errors.New("dns message is a response")
	}
	if h.OpCode != 0 {
		return nil, dnsmessage.Question{}, fmt.Errorf("dns opcode %d is not a query", h.OpCode)
	}
	question, err := p.Question()
	if err != nil {
		return nil, dnsmessage.Question{}, fmt.Errorf("parse dns question: %w", err)
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              dnsmessage.RCodeNameError,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, dnsmessage.Question{}, fmt.Errorf("build dns reply: %w", err)
	}
	if err := b.Question(question); err != nil {
		return nil, dnsmessage.Question{}, fmt.Errorf("build dns reply: %w", err)
	}
	resp, err := b.Finish()
	if err != nil {
		return nil, dnsmessage.Question{}, fmt.Errorf("build dns reply: %w", err)
	}
	return resp, question, nil
}

// queryName renders a query name as printable ASCII, at most MaxQueryName
// bytes, escaping other bytes and backslashes as \DDD.
func queryName(n dnsmessage.Name) []byte {
	out := make([]byte, 0, int(n.Length))
	for _, c := range n.Data[:n.Length] {
		if c >= 0x21 && c <= 0x7e && c != '\\' {
			out = append(out, c)
		} else {
			out = append(out, '\\')
			out = append(out, fmt.Sprintf("%03d", c)...)
		}
		if len(out) >= MaxQueryName {
			return out[:MaxQueryName]
		}
	}
	if len(out) == 0 {
		out = append(out, '.')
	}
	return out
}

// CheckSockType checks that c is a socket of type typ (unix.SOCK_*).
func CheckSockType(c syscall.Conn, typ int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw conn: %w", err)
	}
	var got int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		got, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
	}); err != nil {
		return fmt.Errorf("raw conn control: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("get socket type: %w", serr)
	}
	if got != typ {
		return fmt.Errorf("socket type is %d, want %d", got, typ)
	}
	return nil
}
