package httpfront

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRejectedRequestClosesConnection checks that every refusal of the front
// is answered with Connection: close and that the connection is then closed,
// so that a client without the token cannot keep a connection (and its slot)
// after being refused.
func TestRejectedRequestClosesConnection(t *testing.T) {
	s := start(t, Options{Token: testToken, MaxConnections: 32})
	tests := []struct {
		name   string
		header string // request headers after Host
		host   string // default: the listener's address
		method string
		want   int
	}{
		{name: "no token", want: http.StatusUnauthorized},
		{name: "wrong token", header: "Authorization: Bearer " + strings.Repeat("ee", 32) + "\r\n", want: http.StatusUnauthorized},
		{name: "foreign Host", host: "evil.example:80", header: "Authorization: Bearer " + testToken + "\r\n", want: http.StatusForbidden},
		{name: "foreign Origin", header: "Origin: https://evil.example\r\nAuthorization: Bearer " + testToken + "\r\n", want: http.StatusForbidden},
		{name: "POST /ready with token", method: http.MethodPost, header: "Authorization: Bearer " + testToken + "\r\nContent-Length: 0\r\n", want: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.host == "" {
				tt.host = s.addr
			}
			if tt.method == "" {
				tt.method = http.MethodGet
			}
			c := dial(t, s.addr)
			// A keep-alive request: nothing asks the server to close.
			if _, err := io.WriteString(c, tt.method+" /ready HTTP/1.1\r\nHost: "+tt.host+"\r\n"+tt.header+"\r\n"); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if !resp.Close { // net/http reports Connection: close here
				t.Errorf("%d answered without Connection: close", resp.StatusCode)
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("after a %d the server kept the connection open (read %d bytes, %v)", resp.StatusCode, n, err)
			}
		})
	}
	// An accepted request keeps its connection, as before.
	t.Run("accepted request keeps the connection", func(t *testing.T) {
		c := dial(t, s.addr)
		br := bufio.NewReader(c)
		for i := range 2 {
			if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: "+s.addr+"\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d on one connection: %v", i+1, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("request %d: status %d, close %v; want 200 on a kept connection", i+1, resp.StatusCode, resp.Close)
			}
		}
	})
}

// TestAttackerCannotStarveTokenHolder runs the attacks of issue 8 against the
// default limits (MaxConnections=32, ReadTimeout=10s) and checks that a
// client with the token is answered within 1 s while each attack runs. They
// used to hold every connection slot, for the idle timeout (120 s) or for
// ReadTimeout (10 s).
func TestAttackerCannotStarveTokenHolder(t *testing.T) {
	const bound = time.Second
	tests := []struct {
		name  string
		conns int
		// attack is what each attacking connection does before idling.
		attack func(t *testing.T, c net.Conn, addr string)
	}{
		{"401 then idle", 32, func(t *testing.T, c net.Conn, addr string) {
			if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("attacker's request: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("attacker's request: status %d, want 401", resp.StatusCode)
			}
		}},
		{"403 then idle", 32, func(t *testing.T, c net.Conn, addr string) {
			if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: evil.example\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("attacker's request: %v", err)
			}
			resp.Body.Close()
		}},
		{"silent", 40, func(*testing.T, net.Conn, string) {}},
		{"headers never finished", 40, func(t *testing.T, c net.Conn, addr string) {
			if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: "+addr+"\r\n"); err != nil {
				t.Fatal(err)
			}
		}},
		// More than the pool of unauthenticated connections holds.
		{"silent, beyond the pending pool", pendingPerSlot*32 + 40, func(*testing.T, net.Conn, string) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Options{Token: testToken, MaxConnections: 32, ReadTimeout: 10 * time.Second})
			for range tt.conns {
				tt.attack(t, dial(t, s.addr), s.addr)
			}
			time.Sleep(100 * time.Millisecond) // let the server accept them all
			client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			var worst time.Duration
			for i := range 5 {
				req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/ready", nil)
				req.Header.Set("Authorization", "Bearer "+testToken)
				t0 := time.Now()
				resp, err := client.Do(req)
				el := time.Since(t0)
				if err != nil {
					t.Fatalf("token holder's request %d during the attack (%d connections): %v after %s", i+1, tt.conns, err, el.Round(time.Millisecond))
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("token holder's request %d: status %d, want 200", i+1, resp.StatusCode)
				}
				worst = max(worst, el)
			}
			t.Logf("%s (%d connections): token holder answered within %s (worst of 5)", tt.name, tt.conns, worst.Round(10*time.Microsecond))
			if worst >= bound {
				t.Errorf("token holder waited %s during the attack, want < %s", worst, bound)
			}
		})
	}
}

// TestTokenHoldersStillBounded checks that MaxConnections still bounds the
// connections of clients with the token: with every slot held by an
// authenticated keep-alive connection, a new connection waits until one is
// freed.
func TestTokenHoldersStillBounded(t *testing.T) {
	s := start(t, Options{Token: testToken, MaxConnections: 2, ReadTimeout: 30 * time.Second})
	var held []net.Conn
	for range 2 {
		c := dial(t, s.addr)
		if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: "+s.addr+"\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		held = append(held, c)
	}
	third := dial(t, s.addr)
	if _, err := io.WriteString(third, rawRequest(s.addr, "/ready")); err != nil {
		t.Fatal(err)
	}
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	br := bufio.NewReader(third)
	if line, err := br.ReadString('\n'); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection was answered (%q, %v) while 2 authenticated connections held MaxConnections=2", line, err)
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("third connection not served after a slot was freed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("third connection: status %d, want 200", resp.StatusCode)
	}
}

// TestEvictsOldestPending checks the order of eviction when the pool of
// connections that have not authenticated is full: the oldest goes first,
// and an authenticated connection is never closed for a newcomer.
func TestEvictsOldestPending(t *testing.T) {
	const maxConns = 2
	s := start(t, Options{Token: testToken, MaxConnections: maxConns, ReadTimeout: 30 * time.Second})
	authed := dial(t, s.addr)
	authedR := bufio.NewReader(authed)
	ask := func(c net.Conn, br *bufio.Reader) error {
		if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: "+s.addr+"\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := ask(authed, authedR); err != nil {
		t.Fatal(err)
	}
	// Fill the pending pool with silent connections, in a known order.
	var silent []net.Conn
	for range pendingPerSlot * maxConns {
		silent = append(silent, dial(t, s.addr))
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	// A newcomer evicts the oldest silent connection, and only that one.
	c := dial(t, s.addr)
	if err := ask(c, bufio.NewReader(c)); err != nil {
		t.Fatalf("newcomer with the pending pool full: %v", err)
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	if !closed(silent[0]) {
		t.Error("the oldest pending connection was not closed for the newcomer")
	}
	if closed(silent[1]) {
		t.Error("the second oldest pending connection was closed as well")
	}
	if err := ask(authed, authedR); err != nil {
		t.Errorf("the authenticated connection no longer works: %v", err)
	}
}

// TestHandler4xxClosesConnection checks that a 4xx of the wrapped handler
// closes the connection too, that its other answers keep it, and that
// http.ResponseController still reaches the connection through the front.
func TestHandler4xxClosesConnection(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/missing":
			http.Error(w, "no such session", http.StatusNotFound)
		case "/busy":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "part")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush through the front: %v", err)
			}
		}
	})
	f := New(discardLogger(), Options{Token: testToken, MaxConnections: 4, ReadTimeout: 5 * time.Second}, next)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { f.Serve(l); close(done) }()
	t.Cleanup(func() { f.Close(); <-done })
	addr := l.Addr().String()
	tests := []struct {
		path      string
		want      int
		wantClose bool
	}{
		{"/missing", http.StatusNotFound, true},
		{"/busy", http.StatusServiceUnavailable, false},
		{"/stream", http.StatusOK, false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := io.WriteString(c, "GET "+tt.path+" HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || resp.Close != tt.wantClose {
				t.Errorf("status %d, Connection: close %v; want %d, %v", resp.StatusCode, resp.Close, tt.want, tt.wantClose)
			}
		})
	}
}
