package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of Proxy fields.
const (
	defaultHandshakeTimeout = 30 * time.Second
	defaultConnectTimeout   = 15 * time.Second
	defaultIdleTimeout      = 300 * time.Second
	defaultMaxConns         = 64
	defaultMaxRequestBytes  = 2048
)

// dnsPort is the port audited for DNS events.
const dnsPort = 53

// dnsDenyReason is the reason of every DNS event.
const dnsDenyReason = "dns is not available in the sandbox; use the proxy"

// Proxy is the host side: it decides what each relayed connection may
// reach, connects it there and audits it. Set its fields before the first
// call and do not change or copy it afterwards (change the policy with
// SetPolicy or ChangeGrants); its methods are safe for concurrent use.
type Proxy struct {
	// Policy is what the sandbox may reach at first. Do not change the
	// field once the proxy serves: SetPolicy and ChangeGrants replace the
	// policy in force for new connections (open ones are not cut).
	Policy Policy
	// Resolver resolves allowed CONNECT host names; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// Audit, if not nil, is called once per attempt when it ends: for an
	// allowed one after the relay finished, with bytes and duration; for a
	// denied one at once. It is called from many goroutines at a time.
	Audit func(Event)
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
	// HandshakeTimeout bounds reading the CONNECT request and writing the
	// reply (default 30s). ConnectTimeout bounds resolving and dialling
	// the target (default 15s). IdleTimeout ends a relayed connection on
	// which no byte moved either way for that long (default 300s).
	HandshakeTimeout, ConnectTimeout, IdleTimeout time.Duration
	// MaxConns caps the connections served at a time (default 64). One
	// more is closed at once and audited as denied "connection limit".
	MaxConns int
	// MaxRequestBytes caps the CONNECT request line and headers (default
	// 2048).
	MaxRequestBytes int
	// Local holds the host's own addresses, refused like loopback without
	// a Private grant (a public address of the host reaches every service
	// bound to the wildcard address). nil means the addresses are read
	// afresh for every CONNECT; a long-lived proxy should set a
	// WatchHostAddrs.
	Local LocalAddrs
	// Dial connects to a validated "IP:port"; nil means a net.Dialer.
	// Tests may override it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Terminate, if set, terminates TLS for the targets with a secret or
	// an HTTP rule (terminate_linux.go); every other target keeps an
	// opaque tunnel.
	Terminate *Terminator

	active atomic.Int64 // connections being served

	mu  sync.Mutex             // serialises policy changes
	cur atomic.Pointer[Policy] // the policy in force once changed; never modified
}

func (p *Proxy) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

func (p *Proxy) handshakeTimeout() time.Duration {
	return durationOr(p.HandshakeTimeout, defaultHandshakeTimeout)
}

func (p *Proxy) connectTimeout() time.Duration {
	return durationOr(p.ConnectTimeout, defaultConnectTimeout)
}

func (p *Proxy) idleTimeout() time.Duration { return durationOr(p.IdleTimeout, defaultIdleTimeout) }

func (p *Proxy) maxConns() int64 {
	if p.MaxConns <= 0 {
		return defaultMaxConns
	}
	return int64(p.MaxConns)
}

func (p *Proxy) maxRequestBytes() int {
	if p.MaxRequestBytes <= 0 {
		return defaultMaxRequestBytes
	}
	return p.MaxRequestBytes
}

func (p *Proxy) resolver() Resolver {
	if p.Resolver == nil {
		return net.DefaultResolver
	}
	return p.Resolver
}

func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.Dial != nil {
		return p.Dial(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// audit logs ev and hands it to Audit.
func (p *Proxy) audit(ev Event) {
	p.log().Debug("egress", "kind", ev.Kind, "port", ev.Port, "target", ev.Target, "addr", ev.Addr,
		"decision", ev.Decision, "reason", ev.Reason, "bytes_up", ev.BytesUp, "bytes_down", ev.BytesDown,
		"duration_ms", ev.DurationMS)
	if p.Audit != nil {
		p.Audit(ev)
	}
}

// ServeConn serves one relayed connection c that was accepted on
// 127.0.0.1:port in the sandbox, and closes it. On Policy's proxy port c
// must speak CONNECT; on an MCP port it is connected to 127.0.0.1:port on
// the host; any other port is refused. ServeConn returns when the
// connection has ended, after auditing it; ctx being done ends it early.
func (p *Proxy) ServeConn(ctx context.Context, c net.Conn, port uint16) {
	ev := Event{Time: time.Now(), Kind: KindConnect, Port: port, Decision: DecisionDeny}
	pol := p.policy() // read once: a later change does not cut this connection
	if pol.isMCPPort(port) {
		ev.Kind = KindMCP
	}
	defer func() {
		_ = c.Close()
		ev.DurationMS = float64(time.Since(ev.Time)) / float64(time.Millisecond)
		p.audit(ev)
	}()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()

	if p.active.Add(1) > p.maxConns() {
		p.active.Add(-1)
		ev.Reason = "connection limit"
		return
	}
	defer p.active.Add(-1)

	switch {
	case port == pol.proxyPort():
		p.serveConnect(ctx, c, pol, &ev)
	case ev.Kind == KindMCP:
		p.serveMCP(ctx, c, port, &ev)
	default:
		ev.Reason = "port not granted"
	}
}

// serveMCP connects c to 127.0.0.1:port on the host.
func (p *Proxy) serveMCP(ctx context.Context, c net.Conn, port uint16, ev *Event) {
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port).String()
	ev.Target, ev.Addr = addr, addr
	dctx, cancel := context.WithTimeout(ctx, p.connectTimeout())
	t, err := p.dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		ev.Reason = fmt.Sprintf("dial %s: %v", addr, err)
		return
	}
	defer t.Close()
	p.relay(ctx, c, t, nil, ev)
}

// serveConnect serves a CONNECT request on c.
func (p *Proxy) serveConnect(ctx context.Context, c net.Conn, pol *Policy, ev *Event) {
	hs := p.handshakeTimeout()
	_ = c.SetDeadline(time.Now().Add(hs))
	limit := p.maxRequestBytes()
	br := bufio.NewReaderSize(c, limit)
	line, err := readRequest(br, limit)
	if err != nil {
		ev.Reason = err.Error()
		if he, ok := err.(*httpError); ok {
			p.refuse(c, he.status)
		}
		return
	}
	req, herr := parseRequestLine(line)
	if herr != nil {
		ev.Target = Inert(line, 256)
		ev.Reason = herr.reason
		p.refuse(c, herr.status)
		return
	}
	ev.Target = req.target()
	ok, private := pol.allows(req.host, req.ip.IsValid(), req.port)
	if !ok {
		ev.Reason = "not in allow list"
		p.refuse(c, 403)
		return
	}
	t, herr := p.connectTarget(ctx, req, private, ev)
	if herr != nil {
		ev.Reason = herr.reason
		_ = c.SetDeadline(time.Now().Add(hs))
		p.refuse(c, herr.status)
		return
	}
	defer t.Close()

	// Bytes the client sent after the header (it need not wait for our
	// reply) are in br; they go to the target first.
	pending, _ := br.Peek(br.Buffered())
	_ = c.SetDeadline(time.Now().Add(hs))
	if _, err := io.WriteString(c, establishedReply); err != nil {
		ev.Reason = fmt.Sprintf("write reply: %v", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	if p.Terminate.Terminates(ev.Target) {
		p.serveTerminated(ctx, c, t, req, pending, ev)
		return
	}
	p.relay(ctx, c, t, pending, ev)
}

// relay writes pending to t and then pumps bytes between c and t,
// recording the outcome in ev.
func (p *Proxy) relay(ctx context.Context, c, t net.Conn, pending []byte, ev *Event) {
	ev.Decision = DecisionAllow
	// An allowed connection is audited when it opens, not only when it
	// ends: a long one, or one cut by a crash, is on record at once.
	opened := *ev
	opened.Reason = "connected"
	opened.DurationMS = float64(time.Since(ev.Time)) / float64(time.Millisecond)
	p.audit(opened)
	if len(pending) > 0 {
		_ = t.SetWriteDeadline(time.Now().Add(p.handshakeTimeout()))
		n, err := t.Write(pending)
		ev.BytesUp += int64(n)
		if err != nil {
			ev.Reason = fmt.Sprintf("write to %s: %v", ev.Addr, err)
			return
		}
		_ = t.SetWriteDeadline(time.Time{})
	}
	res := pump(ctx, c, t, p.idleTimeout())
	ev.BytesUp += res.aToB
	ev.BytesDown += res.bToA
	switch {
	case res.idle:
		ev.Reason = "idle timeout"
	case ctx.Err() != nil:
		ev.Reason = "cancelled"
	}
}

// refuse writes an error reply for status to c.
func (p *Proxy) refuse(c net.Conn, status int) {
	if _, err := io.WriteString(c, errorReply(status)); err != nil {
		p.log().Debug("egress: write error reply", "status", status, "err", err)
	}
}

// connectTarget resolves (unless it is a literal) and validates the
// request's host and dials the first safe address that answers.
func (p *Proxy) connectTarget(ctx context.Context, req request, private bool, ev *Event) (net.Conn, *httpError) {
	ctx, cancel := context.WithTimeout(ctx, p.connectTimeout())
	defer cancel()
	cands := []netip.Addr{req.ip}
	what := "target is"
	if !req.ip.IsValid() {
		// Rooted ("name."): the host's resolv.conf search domains must not
		// turn an allowed name into another one.
		addrs, err := p.resolver().LookupNetIP(ctx, "ip", req.host+".")
		if err != nil {
			return nil, &httpError{502, fmt.Sprintf("resolve %s: %v", req.host, err)}
		}
		if len(addrs) == 0 {
			return nil, &httpError{502, fmt.Sprintf("resolve %s: no addresses", req.host)}
		}
		cands, what = addrs, "resolves to"
	}
	local := p.Local
	if local == nil && !private {
		snap, err := SnapshotHostAddrs()
		if err != nil {
			return nil, &httpError{502, fmt.Sprintf("cannot tell the host's own addresses: %v", err)}
		}
		local = snap
	}
	var safe []netip.AddrPort
	var refused error
	for _, a := range cands {
		if err := checkCandidate(a, private, local); err != nil {
			if refused == nil {
				refused = err
			}
			continue
		}
		safe = append(safe, netip.AddrPortFrom(a.Unmap().WithZone(""), req.port))
	}
	if len(safe) == 0 {
		return nil, &httpError{403, fmt.Sprintf("%s %v", what, refused)}
	}
	if refused != nil {
		p.log().Debug("egress: skipped unsafe addresses", "target", req.target(), "first", refused)
	}
	var last error
	for _, ap := range safe {
		ev.Addr = ap.String()
		t, err := p.dial(ctx, "tcp", ev.Addr)
		if err == nil {
			return t, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, &httpError{502, fmt.Sprintf("dial %s: %v", ev.Addr, last)}
}

// checkCandidate checks one resolved address. A Private grant may reach
// any unicast address; without one, neither a reserved address (CheckAddr)
// nor one of the host's own (local) is reached.
func checkCandidate(a netip.Addr, private bool, local LocalAddrs) error {
	if !private {
		if err := CheckAddr(a); err != nil {
			return err
		}
		if iface, ok := local.Local(a); ok {
			return fmt.Errorf("address %s is this host's own (on %s)", a, iface)
		}
		return nil
	}
	u := a.Unmap()
	switch {
	case !u.IsValid():
		return fmt.Errorf("invalid address")
	case u.IsUnspecified(), u.IsMulticast(), u == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("non-unicast address %s", a)
	}
	return nil
}
