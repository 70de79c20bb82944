package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/egress/relay"
)

// Control protocol: see the package documentation and package relay,
// which holds the sender's side.
const (
	// maxControlFDs is how many fds the host makes room for in one
	// message. A message with more is refused; the kernel closes the
	// ones that did not fit.
	maxControlFDs = 8
)

// ServeControl reads control messages from ctl, which must be a
// SOCK_SEQPACKET socket, until end of file or ctx is done. Each 'C'
// message is served with ServeConn in its own goroutine; each 'D' message
// and each malformed message is audited. ServeControl returns once all the
// connections it started have ended: at end of file it waits for them,
// when ctx is done they are closed. It returns nil in both cases, and an
// error if ctl fails otherwise. It does not close ctl.
func (p *Proxy) ServeControl(ctx context.Context, ctl *net.UnixConn) error {
	if err := relay.CheckSockType(ctl, unix.SOCK_SEQPACKET); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { _ = ctl.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, relay.MaxControlMsg+1)
	oob := make([]byte, unix.CmsgSpace(maxControlFDs*4))
	for {
		n, oobn, flags, _, err := ctl.ReadMsgUnix(buf, oob)
		fds, perr := parseRights(oob[:oobn])
		if errors.Is(err, io.EOF) && oobn > 0 {
			// An empty message reads as end of file; one that carries
			// fds is not.
			err = nil
		}
		if err != nil {
			closeFDs(fds)
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read control message: %w", err)
		}
		if perr != nil {
			closeFDs(fds)
			p.controlError(buf[:n], fmt.Sprintf("bad ancillary data: %v", perr))
			continue
		}
		p.handleControl(ctx, buf[:n], flags, fds, &wg)
	}
}

// handleControl acts on one control message and takes ownership of fds.
func (p *Proxy) handleControl(ctx context.Context, msg []byte, flags int, fds []int, wg *sync.WaitGroup) {
	var reason string
	switch {
	case flags&unix.MSG_TRUNC != 0:
		reason = fmt.Sprintf("message longer than %d bytes", relay.MaxControlMsg)
	case flags&unix.MSG_CTRUNC != 0:
		reason = fmt.Sprintf("more than %d fds", maxControlFDs)
	case len(msg) == 0:
		reason = "empty message"
	case msg[0] == relay.MsgConn:
		switch {
		case len(msg) != 3:
			reason = fmt.Sprintf("'C' message of %d bytes, want 3", len(msg))
		case len(fds) != 1:
			reason = fmt.Sprintf("'C' message with %d fds, want 1", len(fds))
		default:
			port := binary.BigEndian.Uint16(msg[1:3])
			c, err := streamConn(fds[0])
			if err != nil {
				p.controlError(msg, fmt.Sprintf("'C' message fd: %v", err))
				return
			}
			wg.Go(func() { p.ServeConn(ctx, c, port) })
			return
		}
	case msg[0] == relay.MsgDNS:
		switch {
		case len(fds) != 0:
			reason = fmt.Sprintf("'D' message with %d fds, want none", len(fds))
		case len(msg) < 4 || len(msg) > relay.MaxControlMsg:
			reason = fmt.Sprintf("'D' message of %d bytes, want 4 to %d", len(msg), relay.MaxControlMsg)
		case !printable(msg[3:]):
			reason = "'D' message query name is not printable ASCII"
		default:
			p.audit(Event{
				Time:     time.Now(),
				Kind:     KindDNS,
				Port:     dnsPort,
				Target:   Inert(string(msg[3:]), 256) + " " + qtypeString(binary.BigEndian.Uint16(msg[1:3])),
				Decision: DecisionDeny,
				Reason:   dnsDenyReason,
			})
			return
		}
	default:
		reason = fmt.Sprintf("unknown message type %s", Inert(string(msg[:1]), 1))
	}
	closeFDs(fds)
	p.controlError(msg, reason)
}

// controlError audits a malformed control message.
func (p *Proxy) controlError(msg []byte, reason string) {
	ev := Event{
		Time:     time.Now(),
		Kind:     KindControl,
		Decision: DecisionDeny,
		Reason:   "malformed control message: " + reason,
	}
	if len(msg) >= 3 && msg[0] == relay.MsgConn {
		ev.Port = binary.BigEndian.Uint16(msg[1:3])
	}
	p.log().Warn("egress: malformed control message", "reason", reason)
	p.audit(ev)
}

// parseRights returns the fds passed in the ancillary data oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		r, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, fmt.Errorf("parse SCM_RIGHTS: %w", err)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// closeFDs closes every fd in fds.
func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// streamConn turns fd, which must be an AF_UNIX SOCK_STREAM socket, into a
// net.Conn. It takes ownership of fd, closing it on error.
func streamConn(fd int) (net.Conn, error) {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("not a socket: %w", err)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("get socket type: %w", err)
	}
	if (dom != unix.AF_UNIX && dom != unix.AF_INET && dom != unix.AF_INET6) || typ != unix.SOCK_STREAM {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("socket is not a stream socket (AF_UNIX, AF_INET or AF_INET6; domain %d, type %d)", dom, typ)
	}
	return fdConn(fd)
}

// fdConn turns the socket fd into a net.Conn. It takes ownership of fd.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "egress-socket")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("socket fd %d to conn: %w", fd, err)
	}
	return c, nil
}

// printable reports whether b is printable ASCII without spaces.
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// qtypeString names a DNS query type as dig does.
func qtypeString(t uint16) string {
	switch t {
	case 1:
		return "A"
	case 2:
		return "NS"
	case 5:
		return "CNAME"
	case 6:
		return "SOA"
	case 12:
		return "PTR"
	case 15:
		return "MX"
	case 16:
		return "TXT"
	case 28:
		return "AAAA"
	case 33:
		return "SRV"
	case 64:
		return "SVCB"
	case 65:
		return "HTTPS"
	case 255:
		return "ANY"
	}
	return "TYPE" + strconv.Itoa(int(t))
}
