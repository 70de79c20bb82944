package httpfront

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestServeConcurrentListeners calls Serve for several TCP listeners at once,
// as soda-mcpd does, and checks that the Host port of every one of them is
// accepted. Registering a port used to be a load, copy and store, so two
// concurrent calls could lose one port, and every request on it got 403.
func TestServeConcurrentListeners(t *testing.T) {
	const (
		trials    = 100
		listeners = 6
	)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(addr string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/ready", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for trial := range trials {
		f := New(discardLogger(), Options{Token: testToken, ReadTimeout: 5 * time.Second}, http.NotFoundHandler())
		var addrs []string
		var ls []net.Listener
		for range listeners {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
			addrs = append(addrs, l.Addr().String())
		}
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				if err := f.Serve(l); err != nil {
					t.Errorf("Serve(%s): %v", l.Addr(), err)
				}
			}()
		}
		close(begin)
		// A listener answers once its Serve has registered its port; once
		// all answer, every registration is done and none may be missing.
		for _, a := range addrs {
			if _, err := get(a); err != nil {
				t.Fatalf("trial %d: GET on %s: %v", trial, a, err)
			}
		}
		var lost []string
		for _, a := range addrs {
			if code, err := get(a); err != nil || code != http.StatusOK {
				lost = append(lost, a)
			}
		}
		f.Close()
		wg.Wait()
		if len(lost) > 0 {
			t.Fatalf("trial %d: %d of %d concurrently served listeners refuse their own Host port: %v", trial, len(lost), listeners, lost)
		}
	}
}
