package mcpbridge_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRelayEcho measures one tools/call round trip through the front
// and the bridge to the mcpecho child, with a plain Go HTTP client.
func BenchmarkRelayEcho(b *testing.B) {
	h := newHarness(b, harnessOpts{})
	sid := h.open("2025-11-25")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"bench"}}}`
	client := &http.Client{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req, _ := http.NewRequest(http.MethodPost, h.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+h.Token)
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var buf [512]byte
		n, _ := resp.Body.Read(buf[:])
		resp.Body.Close()
		if resp.StatusCode != 200 || n == 0 {
			b.Fatal(fmt.Sprintf("status %d", resp.StatusCode))
		}
	}
}
