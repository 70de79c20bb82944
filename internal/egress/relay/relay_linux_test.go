package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// listen listens on 127.0.0.1:0 until the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func portOf(t *testing.T, a net.Addr) uint16 {
	t.Helper()
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", a)
	}
	return uint16(ta.Port)
}

func TestQueryName(t *testing.T) {
	tests := []struct {
		in   dnsmessage.Name
		want string
	}{
		{dnsmessage.MustNewName("example.com."), "example.com."},
		{dnsmessage.MustNewName("."), "."},
		{dnsmessage.Name{Data: [255]byte{'a', ' ', 'b', 0xff, '\\', '.'}, Length: 6}, `a\032b\255\092.`},
		{dnsmessage.MustNewName(strings.Repeat("abcdefgh.", 28)), strings.Repeat("abcdefgh.", 28)},
	}
	for _, tt := range tests {
		got := string(queryName(tt.in))
		if got != tt.want[:min(len(tt.want), MaxQueryName)] {
			t.Errorf("queryName(%q) = %q, want %q", tt.in.String(), got, tt.want)
		}
	}
	long := dnsmessage.Name{Length: 255}
	for i := range long.Data {
		long.Data[i] = 0x01
	}
	got := queryName(long)
	if len(got) != MaxQueryName {
		t.Errorf("queryName(255 control bytes) is %d bytes, want %d", len(got), MaxQueryName)
	}
	for _, c := range got {
		if c < 0x21 || c > 0x7e {
			t.Errorf("queryName(255 control bytes) = %q: byte %#x is not printable", got, c)
			break
		}
	}
}

func TestListen(t *testing.T) {
	ln := listen(t)
	busy := portOf(t, ln.Addr())
	_, err := Listen([]uint16{busy})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d", busy)) {
		t.Errorf("Listen(busy port) = %v, want error naming port %d", err, busy)
	}
	if _, err := Listen([]uint16{0}); err == nil {
		t.Error("Listen(0) succeeded")
	}
	// A free port: take one and release it.
	free := listen(t)
	port := portOf(t, free.Addr())
	free.Close()
	lns, err := Listen([]uint16{port})
	if err != nil {
		t.Skipf("port %d taken again meanwhile: %v", port, err)
	}
	defer closeListeners(lns)
	if got := lns[0].Addr().String(); got != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String() {
		t.Errorf("listening on %s", got)
	}
}

func TestControlMustBeSeqpacket(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	unix.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "control")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	r := &Relay{Control: fc.(*net.UnixConn)}
	if err := r.Serve(context.Background(), []net.Listener{listen(t)}); err == nil {
		t.Error("Relay.Serve with a stream control socket succeeded")
	}
	pc, err := ListenDNSOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ServeDNS(context.Background(), pc); err == nil {
		t.Error("Relay.ServeDNS with a stream control socket succeeded")
	}
	pc, err = ListenDNSOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Relay{}).ServeDNS(context.Background(), pc); err == nil {
		t.Error("Relay.ServeDNS without a control socket succeeded")
	}
}
