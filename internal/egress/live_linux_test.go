package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
)

// connectStatus sends one CONNECT for target on a fresh connection and
// returns the reply's status, the connection and its reader.
func connectStatus(t *testing.T, e *proxyEnv, target string) (int, io.Closer, *bufio.Reader) {
	t.Helper()
	c := e.conn(t, testProxyPort)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	return readReply(t, br), c, br
}

// TestProxyChangeGrants: a grant added while the proxy serves allows the
// next CONNECT, a revoked one refuses it, and a connection opened under a
// grant keeps working after the grant is revoked.
func TestProxyChangeGrants(t *testing.T) {
	e := newProxyEnv(t, Policy{ProxyPort: testProxyPort}, map[string][]netip.Addr{"example.com": addrs("93.184.216.34")})
	g, err := ParseGrant("example.com:443", false)
	if err != nil {
		t.Fatal(err)
	}
	if st, c, _ := connectStatus(t, e, "example.com:443"); st != 403 {
		t.Fatalf("before the grant: status %d, want 403", st)
	} else {
		c.Close()
	}
	if ev := e.rec.next(t); ev.Decision != DecisionDeny || ev.Reason != "not in allow list" {
		t.Fatalf("before the grant: %+v", ev)
	}

	pol, err := e.p.ChangeGrants([]Grant{g}, nil)
	if err != nil || len(pol.Allow) != 1 {
		t.Fatalf("ChangeGrants add = %+v, %v", pol, err)
	}
	if _, err := e.p.ChangeGrants([]Grant{g}, nil); err == nil {
		t.Fatal("granting twice succeeded")
	}
	st, open, br := connectStatus(t, e, "example.com:443")
	if st != 200 {
		t.Fatalf("after the grant: status %d, want 200", st)
	}
	conn := open.(interface {
		io.Writer
		io.Closer
	})

	if _, err := e.p.ChangeGrants(nil, []Grant{g}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := e.p.ChangeGrants(nil, []Grant{g}); err == nil {
		t.Fatal("revoking twice succeeded")
	}
	if got := e.p.CurrentPolicy(); len(got.Allow) != 0 || got.ProxyPort != testProxyPort {
		t.Fatalf("CurrentPolicy after revoke = %+v", got)
	}
	// The connection opened under the grant is not cut.
	if _, err := io.WriteString(conn, "still here"); err != nil {
		t.Fatalf("open connection cut by the revoke: %v", err)
	}
	buf := make([]byte, len("still here"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("open connection after revoke: %q, %v", buf, err)
	}
	if st, c, _ := connectStatus(t, e, "example.com:443"); st != 403 {
		t.Fatalf("after the revoke: status %d, want 403", st)
	} else {
		c.Close()
	}
	conn.Close()
}

// TestProxySetPolicyConcurrent changes the policy while connections are
// served (run with -race): every CONNECT gets 200 or 403, never anything
// else, and the policy a caller reads is never torn.
func TestProxySetPolicyConcurrent(t *testing.T) {
	e := newProxyEnv(t, Policy{ProxyPort: testProxyPort}, map[string][]netip.Addr{"example.com": addrs("93.184.216.34")})
	g, _ := ParseGrant("example.com:443", false)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				e.p.SetPolicy(Policy{ProxyPort: testProxyPort, Allow: []Grant{g}})
			} else {
				e.p.SetPolicy(Policy{ProxyPort: testProxyPort})
			}
			if pol := e.p.CurrentPolicy(); len(pol.Allow) > 1 {
				t.Errorf("torn policy %+v", pol)
			}
		}
	})
	seen := map[int]int{}
	var mu sync.Mutex
	var clients sync.WaitGroup
	for range 8 {
		clients.Go(func() {
			for range 25 {
				st, c, _ := connectStatus(t, e, "example.com:443")
				c.Close()
				mu.Lock()
				seen[st]++
				mu.Unlock()
			}
		})
	}
	go func() {
		for {
			select {
			case <-e.rec.ch:
			case <-stop:
				return
			}
		}
	}()
	clients.Wait()
	close(stop)
	wg.Wait()
	for st := range seen {
		if st != 200 && st != 403 {
			t.Errorf("status %d while the policy changed (seen %v)", st, seen)
		}
	}
	t.Logf("statuses: %v", seen)
}
