package mcpd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetrics scrapes a running soda-mcpd with the Prometheus text parser
// while real sessions run through it (mcpecho children): the counters move
// as the load says, the histogram is consistent, refusals are counted, an
// unauthenticated scrape gets 401.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "state", "m.token")
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"--name", "metrics", "--listen", "127.0.0.1:0", "--token-file", tokFile, "--log-format", "json", "--", echoBin}, io.Discard, &stderr)
	}()
	base := servingURL(t, &stderr, exit)
	tokB, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(tokB))
	client := &http.Client{Timeout: 10 * time.Second}

	// The load: 4 sessions in parallel, each initialize, 25 tools/call,
	// a tools/list, then DELETE; one request without a token.
	const sessions, calls = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- session(client, base+"/mcp", tok, i, calls)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{}`))
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}

	// Without the token: 401, and nothing of the metrics.
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "soda_") {
		t.Fatalf("unauthenticated GET /metrics: %d %q, want 401 without metrics", resp.StatusCode, body)
	}

	// The children of the DELETEd sessions are gone once the bridge says so.
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(5 * time.Second)
	for {
		fams = scrape(t, client, base+"/metrics", tok)
		if value(fams, "soda_mcp_children", nil) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"soda_mcp_sessions_opened_total", nil, sessions},
		{"soda_mcp_children_started_total", nil, sessions},
		{"soda_mcp_sessions_ended_total", map[string]string{"reason": "client"}, sessions},
		{"soda_mcp_children_exited_total", map[string]string{"cause": "exited"}, sessions},
		{"soda_mcp_calls_total", map[string]string{"class": "initialize"}, sessions},
		{"soda_mcp_calls_total", map[string]string{"class": "tools/call"}, sessions * calls},
		{"soda_mcp_calls_total", map[string]string{"class": "tools/list"}, sessions},
		{"soda_mcp_sessions", nil, 0},
		{"soda_mcp_children", nil, 0},
		{"soda_http_refused_total", map[string]string{"reason": "auth"}, 2}, // the POST and the scrape without a token
		{"soda_build_info", map[string]string{"daemon": "soda-mcpd"}, 1},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every series carries the server's name.
	for _, m := range fams["soda_mcp_calls_total"].GetMetric() {
		if label(m, "server") != "metrics" {
			t.Errorf("soda_mcp_calls_total without server=\"metrics\": %v", m)
		}
	}
	// The histogram: one observation per POST holding requests (the
	// initialize is answered by the bridge's own path too), buckets
	// cumulative and ending at the count, a positive sum.
	h := histogram(fams, "soda_mcp_call_duration_seconds", map[string]string{"class": "tools/call"})
	if h == nil || h.GetSampleCount() != sessions*calls || h.GetSampleSum() <= 0 {
		t.Fatalf("tools/call histogram: %v, want %d observations with a positive sum", h, sessions*calls)
	}
	prev := uint64(0)
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() < prev {
			t.Errorf("bucket le=%v: %d after %d: not cumulative", b.GetUpperBound(), b.GetCumulativeCount(), prev)
		}
		prev = b.GetCumulativeCount()
	}
	if prev > h.GetSampleCount() {
		t.Errorf("last bucket %d above the count %d", prev, h.GetSampleCount())
	}
	in, out := value(fams, "soda_mcp_relayed_bytes_total", map[string]string{"direction": "in"}), value(fams, "soda_mcp_relayed_bytes_total", map[string]string{"direction": "out"})
	if in < sessions*calls*50 || out < sessions*calls*50 {
		t.Errorf("relayed bytes in %v out %v: want at least 50 per call each way", in, out)
	}
	cancel()
	<-exit
}

// servingURL waits for soda-mcpd's "serving" line and returns its base URL.
func servingURL(t *testing.T, stderr *syncBuffer, exit <-chan int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case code := <-exit:
			t.Fatalf("soda-mcpd exited %d: %s", code, stderr.String())
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "serving" {
				return strings.TrimSuffix(rec["url"].(string), "/mcp")
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("soda-mcpd did not serve: %s", stderr.String())
	return ""
}

// session runs one MCP session over raw Streamable HTTP.
func session(c *http.Client, url, tok string, n, calls int) error {
	post := func(sid, body string) (string, int, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header.Get("Mcp-Session-Id"), resp.StatusCode, nil
	}
	sid, code, err := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"m","version":"1"}}}`)
	if err != nil || code != 200 || sid == "" {
		return fmt.Errorf("session %d: initialize: %d %v", n, code, err)
	}
	if _, code, err := post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || code != 202 {
		return fmt.Errorf("session %d: initialized: %d %v", n, code, err)
	}
	for i := range calls {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"call %d of session %d"}}}`, i+1, i, n)
		if _, code, err := post(sid, body); err != nil || code != 200 {
			return fmt.Errorf("session %d: call %d: %d %v", n, i, code, err)
		}
	}
	if _, code, err := post(sid, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`); err != nil || code != 200 {
		return fmt.Errorf("session %d: tools/list: %d %v", n, code, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// scrape GETs url with the token and parses the text format.
func scrape(t *testing.T, c *http.Client, url, tok string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// find is the metric of family name with labels (nil: any).
func find(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, v := range labels {
			if label(m, k) != v {
				ok = false
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value (0 when absent).
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := find(fams, name, labels)
	switch {
	case m == nil:
		return 0
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

func histogram(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Histogram {
	if m := find(fams, name, labels); m != nil {
		return m.GetHistogram()
	}
	return nil
}
