package main

// Rows 0 and 17-20: the network. The sandbox has only a loopback, a relay
// (HTTP CONNECT proxy with an allow list) and a DNS sink; everything else
// must be unreachable.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// offhostGate decides whether off-host targets may be contacted: only when
// no route leaves through a non-loopback interface (so nothing can leave),
// when the targets were given explicitly, or when forced. It returns the
// reason to skip, or "".
func (b *battery) offhostGate() string {
	if b.cfg.offhostExplicit || b.cfg.offhostForce {
		return ""
	}
	if routes := externalRoutes(); len(routes) > 0 {
		return fmt.Sprintf("not contacted: routes leave this network namespace (%s; see net-routes); pass --offhost-tcp/--offhost-udp or --offhost-force", strings.Join(routes, ", "))
	}
	return ""
}

// externalRoutes lists the interfaces other than lo that carry a route in
// /proc/self/net/route or /proc/self/net/ipv6_route.
func externalRoutes() []string {
	seen := map[string]bool{}
	var out []string
	add := func(dev string) {
		if dev != "" && dev != "lo" && !seen[dev] {
			seen[dev] = true
			out = append(out, dev)
		}
	}
	if data, err := os.ReadFile("/proc/self/net/route"); err == nil {
		for i, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); i > 0 && len(f) > 0 {
				add(f[0])
			}
		}
	}
	if data, err := os.ReadFile("/proc/self/net/ipv6_route"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 10 {
				add(f[9])
			}
		}
	}
	return out
}

// dialResult reports a dial: blocked iff no connection was made.
func dialResult(network, addr string, timeout time.Duration) Result {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return attempt(fmt.Sprintf("connect %s %s", network, addr), err)
	}
	c.Close()
	return Result{Detail: fmt.Sprintf("connect %s %s: connected", network, addr)}
}

// netProbes is row 18: routes out, host ports on the loopback, off-host
// TCP targets.
func (b *battery) netProbes() []probe {
	ps := []probe{{row: 18, name: "net-routes", run: func() Result {
		routes := externalRoutes()
		if len(routes) == 0 {
			return Result{Blocked: true, Detail: "only loopback routes"}
		}
		return Result{Detail: "routes through " + strings.Join(routes, ", "), List: routes}
	}}}
	if port := b.cfg.hostTCP; port > 0 {
		for _, host := range []string{"127.0.0.1", "::1", "0.0.0.0"} {
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			ps = append(ps, probe{row: 18, name: "host-tcp " + addr, run: func() Result {
				return dialResult("tcp", addr, b.inner())
			}})
		}
	} else {
		ps = append(ps, probe{row: 18, name: "host-tcp", skip: "no --host-tcp given"})
	}
	gate := b.offhostGate()
	for _, addr := range b.cfg.offhostTCP {
		ps = append(ps, probe{row: 18, name: "offhost-tcp " + addr, skip: gate, run: func() Result {
			return dialResult("tcp", addr, min(time.Second, b.inner()))
		}})
	}
	return ps
}

// dnsQuery builds a DNS query for an A record of name.
func dnsQuery(id uint16, name string) []byte {
	q := binary.BigEndian.AppendUint16(nil, id)
	q = append(q, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, 1, 0, 1) // root; type A; class IN
}

// dnsRcodes names DNS response codes.
var dnsRcodes = map[byte]string{0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}

// udpDNS sends a DNS query to addr and waits up to wait for any answer:
// blocked iff none comes.
func udpDNS(addr, name string, wait time.Duration) Result {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return attempt("udp "+addr, err)
	}
	defer c.Close()
	if _, err := c.Write(dnsQuery(0x5b0e, name)); err != nil {
		return attempt("send DNS query to "+addr, err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return attempt("read DNS answer from "+addr, err)
	}
	rcode := "short answer"
	if n >= 4 {
		rcode = dnsRcodes[buf[3]&0x0f]
		if rcode == "" {
			rcode = fmt.Sprintf("rcode %d", buf[3]&0x0f)
		}
	}
	return Result{Detail: fmt.Sprintf("DNS server %s answered (%d bytes, %s)", addr, n, rcode)}
}

// systemNameservers lists the nameserver lines of /etc/resolv.conf.
func systemNameservers() []string {
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, f[1])
		}
	}
	return out
}

// dnsProbes is row 17: a name lookup (which the DNS sink answers NXDOMAIN)
// and direct queries to public resolvers.
func (b *battery) dnsProbes() []probe {
	name := b.cfg.dnsName
	lookup := probe{row: 17, name: "dns-lookup", run: func() Result {
		r := net.DefaultResolver
		via := "the system resolver"
		if addr := b.cfg.resolver; addr != "" {
			via = addr
			r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.inner())
		defer cancel()
		addrs, err := r.LookupHost(ctx, name)
		if err != nil {
			return Result{Blocked: true, Errno: errnoName(err), Detail: fmt.Sprintf("lookup %s via %s: %v", name, via, err)}
		}
		return Result{Detail: fmt.Sprintf("lookup %s via %s: resolved to %v", name, via, addrs)}
	}}
	if b.cfg.resolver == "" && !b.cfg.offhostForce {
		for _, ns := range systemNameservers() {
			if ip := net.ParseIP(ns); ip == nil || !ip.IsLoopback() {
				lookup.skip = b.offhostGate()
				break
			}
		}
	}
	ps := []probe{lookup}
	gate := b.offhostGate()
	for _, addr := range b.cfg.offhostUDP {
		ps = append(ps, probe{row: 17, name: "dns-udp " + addr, skip: gate, run: func() Result {
			return udpDNS(addr, name, min(time.Second, b.inner()))
		}})
	}
	return ps
}

// proxyReply is the relay's answer to one request.
type proxyReply struct {
	status int
	conn   net.Conn
	br     *bufio.Reader
}

// proxyRequest sends raw to the proxy and reads the status line and
// headers. The caller closes the connection.
func proxyRequest(proxy, raw string, timeout time.Duration) (*proxyReply, error) {
	c, err := net.DialTimeout("tcp", proxy, timeout)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, raw); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("connection closed without a reply")
		}
		return nil, err
	}
	status, err := parseStatusLine(line)
	if err != nil {
		c.Close()
		return nil, err
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("reading headers: %w", err)
		}
		if strings.TrimRight(h, "\r\n") == "" {
			break
		}
	}
	return &proxyReply{status: status, conn: c, br: br}, nil
}

// parseStatusLine returns the code of an "HTTP/1.x NNN reason" line.
func parseStatusLine(line string) (int, error) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0, fmt.Errorf("bad status line %q", strings.TrimSpace(line))
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 || code > 999 {
		return 0, fmt.Errorf("bad status code in %q", strings.TrimSpace(line))
	}
	return code, nil
}

// connectRequest is a CONNECT request for target with a Host header.
func connectRequest(target, host string) string {
	return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, host)
}

// proxyRefused sends raw to the relay: blocked iff the reply is not 2xx.
func proxyRefused(proxy, what, raw string, timeout time.Duration) Result {
	rep, err := proxyRequest(proxy, raw, timeout)
	if err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: fmt.Sprintf("%s via %s: %v", what, proxy, err)}
	}
	rep.conn.Close()
	if rep.status < 200 || rep.status > 299 {
		return Result{Blocked: true, Detail: fmt.Sprintf("%s via %s: status %d", what, proxy, rep.status)}
	}
	return Result{Detail: fmt.Sprintf("%s via %s: status %d: the relay let it through", what, proxy, rep.status)}
}

// echoVia CONNECTs to target through proxy, sends line and reads one line
// back. It returns the status (0 when none) and the echo.
func echoVia(proxy, target, line string, timeout time.Duration) (int, string, error) {
	rep, err := proxyRequest(proxy, connectRequest(target, target), timeout)
	if err != nil {
		return 0, "", err
	}
	defer rep.conn.Close()
	if rep.status < 200 || rep.status > 299 {
		return rep.status, "", fmt.Errorf("status %d", rep.status)
	}
	if _, err := io.WriteString(rep.conn, line); err != nil {
		return rep.status, "", err
	}
	echo, err := rep.br.ReadString('\n')
	return rep.status, echo, err
}

// proxyAllowProbe is row 0, the positive control: CONNECT to the
// allow-listed echo target must work and echo "ping\n".
func (b *battery) proxyAllowProbe() probe {
	p := probe{row: 0, name: "allowed-connect"}
	target := b.cfg.allowConnect
	if target == "" {
		p.skip = "no --allow-connect given"
		return p
	}
	p.run = func() Result {
		status, echo, err := echoVia(b.cfg.proxy, target, "ping\n", b.inner())
		if err == nil && echo == "ping\n" {
			return Result{Detail: fmt.Sprintf("CONNECT %s via %s: status %d, echo %q", target, b.cfg.proxy, status, echo)}
		}
		return Result{Blocked: true, Errno: errnoName(err),
			Detail: fmt.Sprintf("CONNECT %s via %s: status %d, echo %q, error %v", target, b.cfg.proxy, status, echo, err)}
	}
	return p
}

// proxyDenyProbes is row 19: requests the relay must refuse.
func (b *battery) proxyDenyProbes() []probe {
	proxy := b.cfg.proxy
	var ps []probe
	for _, t := range b.cfg.denyConnect {
		ps = append(ps, probe{row: 19, name: "deny-connect " + t, run: func() Result {
			return proxyRefused(proxy, "CONNECT "+t, connectRequest(t, t), b.inner())
		}})
	}
	if len(b.cfg.denyConnect) == 0 {
		ps = append(ps, probe{row: 19, name: "deny-connect", skip: "no --deny-connect given"})
	}
	smuggle := probe{row: 19, name: "proxy host-header mismatch"}
	if len(b.cfg.denyConnect) == 0 || b.cfg.allowConnect == "" {
		smuggle.skip = "needs --deny-connect and --allow-connect"
	} else {
		deny, allow := b.cfg.denyConnect[0], b.cfg.allowConnect
		smuggle.run = func() Result {
			return proxyRefused(proxy, fmt.Sprintf("CONNECT %s with Host: %s", deny, allow), connectRequest(deny, allow), b.inner())
		}
	}
	ps = append(ps, smuggle)
	type tc struct{ name, what, raw string }
	long := strings.Repeat("a", 8192) + ".example:443"
	cases := []tc{
		{"proxy plain GET", "GET http://example.com/",
			"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"},
		{"proxy oversize request line", "CONNECT <8 KiB host>", connectRequest(long, "x.example:443")},
	}
	for _, t := range []string{"[::1]:80", "127.1:80", "2130706433:80", "0x7f000001:80"} {
		cases = append(cases, tc{"proxy CONNECT " + t, "CONNECT " + t, connectRequest(t, t)})
	}
	for _, c := range cases {
		ps = append(ps, probe{row: 19, name: c.name, run: func() Result {
			return proxyRefused(proxy, c.what, c.raw, b.inner())
		}})
	}
	return ps
}

// bindProbes is row 20: a listener that shadows the relay's port. Any
// bind error keeps the relay's port ours-proof.
func (b *battery) bindProbes() []probe {
	_, portStr, err := net.SplitHostPort(b.cfg.proxy)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		return []probe{{row: 20, name: "bind relay port", skip: "cannot parse --proxy " + b.cfg.proxy}}
	}
	type tc struct {
		name   string
		family int
		addr   unix.Sockaddr
	}
	cases := []tc{
		{"bind 0.0.0.0:" + portStr, unix.AF_INET, &unix.SockaddrInet4{Port: port}},
		{"bind [::]:" + portStr, unix.AF_INET6, &unix.SockaddrInet6{Port: port}},
		{"bind 127.0.0.1:" + portStr, unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}},
	}
	var ps []probe
	for _, c := range cases {
		ps = append(ps, probe{row: 20, name: c.name, run: func() Result {
			fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return attempt("socket", err)
			}
			defer unix.Close(fd)
			if err := unix.Bind(fd, c.addr); err != nil {
				return attempt(c.name, err)
			}
			return attempt(c.name+" and listen", unix.Listen(fd, 1))
		}})
	}
	return ps
}

// cmdConnect is "sbxprobe connect TARGET": CONNECT through the relay, send
// a line, print {"status":N,"echo":"..."} (and "error" if it failed).
func cmdConnect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	proxy := fs.String("proxy", "127.0.0.1:18080", "relay address")
	send := fs.String("send", "ping\n", "line to send after the tunnel is up")
	timeout := fs.Duration("timeout", 3*time.Second, "overall timeout")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: sbxprobe connect [--proxy ADDR] [--send LINE] [--timeout D] TARGET")
		return 2
	}
	type out struct {
		Status int    `json:"status"`
		Echo   string `json:"echo"`
		Error  string `json:"error,omitempty"`
	}
	status, echo, err := echoVia(*proxy, pos[0], *send, *timeout)
	o := out{Status: status, Echo: echo}
	if err != nil {
		o.Error = err.Error()
	}
	return writeJSON(stdout, o)
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
