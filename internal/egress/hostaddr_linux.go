package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LocalAddrs tells whether an address is one of this host's own. A grant
// that resolves to such an address would reach every service on the host
// bound to the wildcard address, whatever range the address is in, so the
// proxy treats these like loopback (refused without a Private grant).
type LocalAddrs interface {
	// Local reports whether a is assigned to one of the host's interfaces,
	// and which.
	Local(a netip.Addr) (iface string, ok bool)
}

// HostAddrs is the set of the host's interface addresses, kept current by
// a netlink subscription to address changes in the network namespace it
// was created in. Its methods are safe for concurrent use.
type HostAddrs struct {
	log  *slog.Logger
	nl   *os.File // the subscription; nil for a snapshot
	done chan struct{}

	dumpMu sync.Mutex // one dump at a time on dump
	dump   int        // netlink socket for address dumps, in the same netns

	mu    sync.RWMutex
	addrs map[netip.Addr]string // address → interface name
	stale bool                  // the subscription failed: read afresh
}

// WatchHostAddrs reads the host's addresses and subscribes to their
// changes. Close stops the subscription.
func WatchHostAddrs(log *slog.Logger) (*HostAddrs, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("watch host addresses: netlink socket: %w", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch host addresses: bind netlink socket: %w", err)
	}
	dump, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch host addresses: netlink socket: %w", err)
	}
	h := &HostAddrs{log: log, nl: os.NewFile(uintptr(fd), "netlink-route"), done: make(chan struct{}), dump: dump}
	// Subscribed first, read second: a change in between is both seen
	// and notified, never lost.
	if err := h.reload(); err != nil {
		h.nl.Close()
		unix.Close(dump)
		return nil, err
	}
	go h.watch()
	return h, nil
}

// SnapshotHostAddrs reads the host's addresses once, without a
// subscription: for tests and short-lived tools.
func SnapshotHostAddrs() (*HostAddrs, error) {
	dump, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("read host addresses: netlink socket: %w", err)
	}
	defer unix.Close(dump)
	h := &HostAddrs{log: slog.New(slog.DiscardHandler), dump: dump}
	return h, h.reload()
}

// Close ends the subscription. The set keeps its last contents.
func (h *HostAddrs) Close() error {
	if h.nl == nil {
		return nil
	}
	err := h.nl.Close()
	<-h.done
	h.dumpMu.Lock()
	defer h.dumpMu.Unlock()
	if h.dump >= 0 {
		unix.Close(h.dump)
		h.dump = -1
	}
	return err
}

// Local implements LocalAddrs. IPv4-mapped and other IPv6 forms that
// embed an IPv4 address are checked for the embedded address too.
func (h *HostAddrs) Local(a netip.Addr) (string, bool) {
	a = a.WithZone("")
	cands := []netip.Addr{a.Unmap()}
	if v4, _, ok := embeddedV4(a); ok {
		cands = append(cands, v4)
	}
	h.mu.RLock()
	stale := h.stale
	h.mu.RUnlock()
	if stale {
		// The subscription is gone: pay for a fresh read rather than
		// trust a set that may be out of date.
		if err := h.reload(); err != nil {
			h.log.Warn("egress: read host addresses", "err", err)
		}
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, c := range cands {
		if iface, ok := h.addrs[c]; ok {
			return iface, true
		}
	}
	return "", false
}

// reload reads every address of every interface with an RTM_GETADDR
// dump on h.dump (not with package net, whose sockets would be made in
// whatever network namespace the calling thread is in).
func (h *HostAddrs) reload() error {
	h.dumpMu.Lock()
	defer h.dumpMu.Unlock()
	if h.dump < 0 {
		return errors.New("read host addresses: closed")
	}
	addrs, err := dumpAddrs(h.dump)
	if err != nil {
		return fmt.Errorf("read host addresses: %w", err)
	}
	h.mu.Lock()
	h.addrs = addrs
	h.stale = false
	h.mu.Unlock()
	return nil
}

// dumpAddrs asks the kernel for every interface address over fd.
func dumpAddrs(fd int) (map[netip.Addr]string, error) {
	const seq = 1
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtGenmsg)
	*(*unix.NlMsghdr)(unsafe.Pointer(&req[0])) = unix.NlMsghdr{
		Len: uint32(len(req)), Type: unix.RTM_GETADDR, Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: seq,
	}
	req[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send RTM_GETADDR: %w", err)
	}
	addrs := make(map[netip.Addr]string)
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("receive RTM_GETADDR: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse RTM_GETADDR: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return addrs, nil
			case unix.NLMSG_ERROR:
				return nil, errors.New("RTM_GETADDR: the kernel answered an error")
			case unix.RTM_NEWADDR:
				addAddr(addrs, m)
			}
		}
	}
}

// addAddr records the address of one RTM_NEWADDR message.
func addAddr(addrs map[netip.Addr]string, m syscall.NetlinkMessage) {
	if len(m.Data) < unix.SizeofIfAddrmsg {
		return
	}
	ifa := (*unix.IfAddrmsg)(unsafe.Pointer(&m.Data[0]))
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return
	}
	// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the same
	// but for a point-to-point link, where it is the peer's (and IPv6
	// sends only IFA_ADDRESS).
	name := fmt.Sprintf("interface %d", ifa.Index)
	var local, address netip.Addr
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LABEL:
			name = strings.TrimRight(string(a.Value), "\x00")
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(a.Value)
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(a.Value)
		}
	}
	if !local.IsValid() {
		local = address
	}
	if local.IsValid() {
		addrs[local.Unmap()] = name
	}
}

// watch reloads the set on every address notification until Close.
func (h *HostAddrs) watch() {
	defer close(h.done)
	buf := make([]byte, 64<<10)
	for {
		_, err := h.nl.Read(buf)
		switch {
		case err == nil, errors.Is(err, unix.ENOBUFS):
			// A notification, or so many that some were dropped:
			// either way the set is read afresh.
			if err := h.reload(); err != nil {
				h.log.Warn("egress: reload host addresses", "err", err)
				h.setStale()
			}
		case errors.Is(err, os.ErrClosed):
			return
		default:
			h.log.Warn("egress: host address subscription failed; reading addresses per connection", "err", err)
			h.setStale()
			return
		}
	}
}

func (h *HostAddrs) setStale() {
	h.mu.Lock()
	h.stale = true
	h.mu.Unlock()
}
