package main

// Rows 1, 3 and 4: Unix sockets of the host (by path and abstract name) and
// the socket families seccomp must refuse.

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// unixPathProbes is row 1: one probe per --unix path.
func (b *battery) unixPathProbes() []probe {
	if len(b.cfg.unix) == 0 {
		return []probe{{row: 1, name: "unix-path", skip: "no --unix given"}}
	}
	var ps []probe
	for _, p := range b.cfg.unix {
		ps = append(ps, probe{row: 1, name: "unix-path " + p, run: func() Result {
			vis := "stat: visible"
			if st, err := os.Stat(p); err != nil {
				vis = "stat: " + errnoName(err) + " (not visible)"
			} else if st.Mode()&os.ModeSocket == 0 {
				vis = "stat: visible but not a socket (" + st.Mode().String() + ")"
			}
			r := unixConnect(p)
			r.Detail = vis + "; " + r.Detail
			return r
		}})
	}
	return ps
}

// defaultAbstract are abstract names probed on every run: the X server's
// and a D-Bus-looking one.
var defaultAbstract = []string{"/tmp/.X11-unix/X0", "/tmp/dbus-0123456789"}

// abstractProbes is row 3: the --abstract names and the defaults.
func (b *battery) abstractProbes() []probe {
	var ps []probe
	seen := map[string]bool{}
	for _, n := range append(append([]string{}, b.cfg.abstract...), defaultAbstract...) {
		n = strings.TrimPrefix(n, "@")
		if seen[n] {
			continue
		}
		seen[n] = true
		ps = append(ps, probe{row: 3, name: "abstract @" + n, run: func() Result { return unixConnect("@" + n) }})
	}
	return ps
}

// unixConnect tries socket(AF_UNIX)+connect to addr, a path or "@name",
// with each socket type until one fits: blocked iff no connection is made.
func unixConnect(addr string) Result {
	var last Result
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_SEQPACKET, unix.SOCK_DGRAM} {
		fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return Result{Blocked: true, Errno: errnoName(err),
				Detail: fmt.Sprintf("socket(AF_UNIX): %v (%s)", err, unixLayer("socket", err, addr))}
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: addr})
		unix.Close(fd)
		switch {
		case err == nil:
			return Result{Detail: fmt.Sprintf("connect(%s, %s): connected", addr, sockTypeName(typ))}
		case err == unix.EAGAIN:
			return Result{Errno: "EAGAIN", Detail: fmt.Sprintf("connect(%s): EAGAIN: reached the listener (its backlog is full)", addr)}
		case err == unix.EPROTOTYPE:
			last = Result{Blocked: true, Errno: "EPROTOTYPE", Detail: fmt.Sprintf("connect(%s): no socket type matched", addr)}
			continue
		}
		return Result{Blocked: true, Errno: errnoName(err),
			Detail: fmt.Sprintf("connect(%s): %v (%s)", addr, err, unixLayer("connect", err, addr))}
	}
	return last
}

// sockTypeName names a socket type for details.
func sockTypeName(typ int) string {
	switch typ {
	case unix.SOCK_STREAM:
		return "SOCK_STREAM"
	case unix.SOCK_DGRAM:
		return "SOCK_DGRAM"
	case unix.SOCK_SEQPACKET:
		return "SOCK_SEQPACKET"
	}
	return fmt.Sprint(typ)
}

// unixLayer names the sandbox layer that most likely produced err at stage
// ("socket" or "connect") for addr.
func unixLayer(stage string, err error, addr string) string {
	e, _ := errnoOf(err)
	abstract := strings.HasPrefix(addr, "@")
	switch {
	case stage == "socket" && e == unix.EPERM:
		return "seccomp refused the socket family"
	case stage == "socket":
		return "socket() failed"
	case e == unix.ENOENT:
		return "not visible in this mount namespace"
	case e == unix.EACCES:
		return "Landlock or file permissions"
	case e == unix.EPERM && abstract:
		return "Landlock abstract-socket scoping"
	case e == unix.EPERM:
		return "Landlock or an LSM"
	case e == unix.ECONNREFUSED && abstract:
		return "no such name in this network namespace"
	case e == unix.ECONNREFUSED:
		return "visible, but nothing listens here"
	}
	return "connect() failed"
}

// socketFamilyProbes is row 4: socket() for families other than
// AF_INET/AF_INET6 stream and datagram must fail. socketpair(AF_UNIX) is a
// positive control that must work.
func socketFamilyProbes() []probe {
	type tc struct {
		name             string
		domain, typ, pro int
	}
	cases := []tc{
		{"socket AF_VSOCK SOCK_STREAM", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
		{"socket AF_NETLINK NETLINK_ROUTE", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
		{"socket AF_PACKET SOCK_RAW", unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))},
		{"socket AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
		{"socket AF_KEY", unix.AF_KEY, unix.SOCK_RAW, 2 /* PF_KEY_V2 */},
		{"socket AF_INET SOCK_RAW", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
		{"socket AF_INET6 SOCK_RAW", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6},
		{"socket AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 1 /* BTPROTO_HCI */},
		{"socket AF_UNIX SOCK_STREAM", unix.AF_UNIX, unix.SOCK_STREAM, 0},
		{"socket AF_UNIX SOCK_DGRAM", unix.AF_UNIX, unix.SOCK_DGRAM, 0},
	}
	var ps []probe
	for _, c := range cases {
		ps = append(ps, probe{row: 4, name: c.name, run: func() Result {
			fd, err := unix.Socket(c.domain, c.typ|unix.SOCK_CLOEXEC, c.pro)
			if err == nil {
				unix.Close(fd)
			}
			return attempt(strings.TrimPrefix(c.name, "socket ")+" socket()", err)
		}})
	}
	ps = append(ps, probe{row: 4, name: "socketpair AF_UNIX", info: true, run: func() Result {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return attempt("socketpair(AF_UNIX) (positive control: must work)", err)
	}})
	return ps
}

// htons converts a short to network byte order.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
