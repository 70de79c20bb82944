package mcpbridge_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRelayEcho measures one tools/call round trip through the front
// and the bridge to the mcpecho child, with a plain Go HTTP client, with
// the Prometheus metrics off and on (make bench-metrics compares them).
func BenchmarkRelayEcho(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			h := newHarness(b, harnessOpts{metrics: on})
			sid := h.open("2025-11-25")
			client := &http.Client{}
			for b.Loop() {
				call(b, client, h, sid)
			}
		})
	}
}

// BenchmarkRelayEchoParallel is BenchmarkRelayEcho from 8 sessions at once
// (GOMAXPROCS goroutines share them), where metric updates could contend.
func BenchmarkRelayEchoParallel(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			h := newHarness(b, harnessOpts{metrics: on})
			sids := make(chan string, 8)
			for range 8 {
				sids <- h.open("2025-11-25")
			}
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				sid := <-sids
				defer func() { sids <- sid }()
				client := &http.Client{}
				for pb.Next() {
					call(b, client, h, sid)
				}
			})
		})
	}
}

func call(b *testing.B, client *http.Client, h *harness, sid string) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"bench"}}}`
	req, _ := http.NewRequest(http.MethodPost, h.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+h.Token)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	var buf [512]byte
	n, _ := resp.Body.Read(buf[:])
	resp.Body.Close()
	if resp.StatusCode != 200 || n == 0 {
		b.Errorf("status %d", resp.StatusCode)
	}
}
