package mcpbridge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkRelayEcho measures one tools/call round trip through the front
// and the bridge to the mcpecho child, with a plain Go HTTP client.
func BenchmarkRelayEcho(b *testing.B) {
	h := newHarness(b, harnessOpts{})
	sid := h.open("2025-11-25")
	client := &http.Client{}
	for b.Loop() {
		call(b, client, h, sid)
	}
}

// BenchmarkRelayEchoPaired runs the same calls as BenchmarkRelayEcho
// against four bridges at once, metrics off, on, on, off (ABBA: the
// bridges made later were a few per cent slower here, whatever their
// metrics), one call to each per iteration in rotating order, each timed:
// the drift of a shared machine (several per cent between rounds here)
// hits both modes alike. It reports each mode's calls per second and
// on/off.
func BenchmarkRelayEchoPaired(b *testing.B) {
	modes := [4]int{0, 1, 1, 0} // 1: metrics on
	var hs [4]*harness
	var sids [4]string
	for k, m := range modes {
		hs[k] = newHarness(b, harnessOpts{metrics: m == 1})
		sids[k] = hs[k].open("2025-11-25")
	}
	client := &http.Client{}
	var spent [2]time.Duration
	var n [2]int
	i := 0
	for b.Loop() {
		for j := range 4 {
			k := (i + j) % 4
			t0 := time.Now()
			call(b, client, hs[k], sids[k])
			spent[modes[k]] += time.Since(t0)
			n[modes[k]]++
		}
		i++
	}
	off, on := float64(n[0])/spent[0].Seconds(), float64(n[1])/spent[1].Seconds()
	b.ReportMetric(off, "off-calls/s")
	b.ReportMetric(on, "on-calls/s")
	b.ReportMetric(on/off, "on/off")
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
