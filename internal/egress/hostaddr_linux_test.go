package egress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns moves the test's goroutine, locked to its thread for good, into
// a new network namespace with lo up, and returns a function that runs ip(8)
// there and the namespace's fd. When the test ends its goroutine exits, and
// the thread and namespace go with it. It skips without root.
func inNetns(t *testing.T) (ip func(args ...string), nsfd int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private network namespace")
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Skipf("ip (iproute2) not found: %v", err)
	}
	runtime.LockOSThread() // never unlocked: see above
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET): %v", err)
	}
	nsfd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open netns: %v", err)
	}
	t.Cleanup(func() { unix.Close(nsfd) })
	// Commands fork from this locked thread, so they run in its namespace.
	ip = func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipPath, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "set", "lo", "up")
	return ip, nsfd
}

// inNs runs f on a fresh thread that joined the network namespace nsfd.
func inNs[T any](nsfd int, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			var zero T
			ch <- result{zero, fmt.Errorf("setns: %w", err)}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

func waitLocal(t *testing.T, h *HostAddrs, a netip.Addr, want bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if _, got := h.Local(a); got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Local(%s) still %v after %v; want %v", a, !want, waitTimeout, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHostAddrsFollowChanges: the set follows addresses added to and
// removed from the host (here a private namespace standing in for it),
// without a restart.
func TestHostAddrsFollowChanges(t *testing.T) {
	pub := netip.MustParseAddr("1.2.3.4")
	run, _ := inNetns(t)
	{
		h, err := WatchHostAddrs(testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if _, ok := h.Local(netip.MustParseAddr("127.0.0.1")); !ok {
			t.Error("127.0.0.1 on lo is not among the host's addresses")
		}
		if _, ok := h.Local(pub); ok {
			t.Fatalf("%s is local before it was added", pub)
		}
		run("addr", "add", "1.2.3.4/32", "dev", "lo")
		waitLocal(t, h, pub, true)
		if iface, _ := h.Local(netip.MustParseAddr("::ffff:1.2.3.4")); iface != "lo" {
			t.Errorf("IPv4-mapped form: interface %q, want lo", iface)
		}
		run("addr", "add", "2001:db8:1::4/128", "dev", "lo")
		waitLocal(t, h, netip.MustParseAddr("2001:db8:1::4"), true)
		run("addr", "del", "1.2.3.4/32", "dev", "lo")
		waitLocal(t, h, pub, false)
	}
	// A snapshot, read in this namespace, holds what is there now.
	run("addr", "add", "1.2.3.5/32", "dev", "lo")
	snap, err := SnapshotHostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Local(netip.MustParseAddr("1.2.3.5")); !ok {
		t.Error("the snapshot misses 1.2.3.5")
	}
}

// TestProxyRefusesHostAddress is the attack: a grant whose name resolves to
// one of the host's own addresses, outside every reserved range, must not
// reach a service the host binds to the wildcard address. A Private grant
// is the control: the same target is reachable with it.
func TestProxyRefusesHostAddress(t *testing.T) {
	run, nsfd := inNetns(t)
	{
		run("addr", "add", "1.2.3.4/32", "dev", "lo")
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "host service")
				c.Close()
			}
		}()
		port := portOf(t, ln.Addr())
		// Made here, so it watches this namespace; the proxy's goroutines
		// run in the test binary's own.
		h, err := WatchHostAddrs(testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		target := fmt.Sprintf("pub.test:%d", port)
		for _, tc := range []struct {
			name    string
			private bool
			want    int
		}{
			{"public grant", false, 403},
			{"private grant (control)", true, 200},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g, err := ParseGrant(target, tc.private)
				if err != nil {
					t.Fatal(err)
				}
				e := newProxyEnv(t, Policy{Allow: []Grant{g}, ProxyPort: testProxyPort}, map[string][]netip.Addr{"pub.test": addrs("1.2.3.4")})
				e.p.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
					return inNs(nsfd, func() (net.Conn, error) {
						var d net.Dialer
						return d.DialContext(ctx, network, addr)
					})
				}
				e.p.Local = h
				c := e.conn(t, testProxyPort)
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
				br := bufio.NewReader(c)
				if got := readReply(t, br); got != tc.want {
					t.Fatalf("CONNECT %s: status %d, want %d", target, got, tc.want)
				}
				if tc.want == 200 {
					line, _ := br.ReadString('\n')
					if line != "host service\n" {
						t.Errorf("read %q through the private grant", line)
					}
					c.Close()
				}
				ev := e.rec.next(t)
				if tc.want == 403 && !strings.Contains(ev.Reason, "1.2.3.4 is this host's own") {
					t.Errorf("reason %q, want the host's own address named", ev.Reason)
				}
			})
		}
	}
}
