package llmgateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// The gateway against the direct path (make bench-llm, issue 25's
// targets): a client doing keep-alive requests to a loopback TLS upstream
// that plays a provider, directly over TLS, and through the gateway
// (client to gateway plain HTTP on the loopback, gateway to upstream TLS):
//   - a small JSON message with its usage: the gateway's added latency;
//   - an event stream whose first event is flushed at once: the added
//     time to its first byte;
//   - a 64 MiB body: the throughput of the terminated TLS.
//
// The Benchmark functions measure one path each (go test -bench); the
// paired TestBenchLLM (SODA_BENCH=1) alternates the two paths request by
// request, so that the drift of a shared machine hits both alike, and
// writes the table with the ratios. Nothing is gated on a time.

// benchStreamBytes is the size of the throughput body.
const benchStreamBytes = 64 << 20

// benchRequest is a small Messages API request, as an agent sends.
var benchRequest = `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"` + strings.Repeat("x", 900) + `"}]}`

// benchJSON is the upstream's answer to it.
var benchJSON = []byte(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"` +
	strings.Repeat("y", 400) + `"}],"stop_reason":"end_turn","usage":{"input_tokens":231,"output_tokens":97,"cache_read_input_tokens":0}}` + "\n")

// benchSSE is the event stream the upstream sends, one flush an event.
var benchSSE = func() [][]byte {
	ev := func(name, data string) []byte { return []byte("event: " + name + "\ndata: " + data + "\n\n") }
	out := [][]byte{ev("message_start", `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-test","usage":{"input_tokens":231,"output_tokens":1}}}`)}
	for range 20 {
		out = append(out, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a few words of the answer "}}`))
	}
	return append(out, ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":97}}`),
		ev("message_stop", `{"type":"message_stop"}`))
}()

var benchSSELen = func() (n int) {
	for _, e := range benchSSE {
		n += len(e)
	}
	return n
}()

// benchEnv is an upstream, a gateway in front of it and a client for each
// path, each keeping its connections alive.
type benchEnv struct {
	direct, viaGateway *http.Client
	// upstream and gateway are the base URLs of the two paths;
	// placeholder is the gateway's key.
	upstream, gateway, placeholder string
	proto                          string // the gateway's protocol to the upstream
}

func newBenchEnv(tb testing.TB) *benchEnv {
	tb.Helper()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(benchJSON)))
		_, _ = w.Write(benchJSON)
	})
	mux.HandleFunc("POST /v1/stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		f := w.(http.Flusher)
		for _, e := range benchSSE {
			_, _ = w.Write(e)
			f.Flush()
		}
	})
	mux.HandleFunc("GET /v1/large", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(benchStreamBytes))
		for n := 0; n < benchStreamBytes; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != realKey {
			http.Error(w, "wrong key", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	// The providers' APIs offer HTTP/2, as this upstream does; the
	// gateway's transport and the direct client both take it.
	srv.EnableHTTP2 = os.Getenv("SODA_BENCH_H1") != "1"
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	up, err := ParseUpstream(srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := Lookup("anthropic")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := New(Config{RootCAs: pool, Routes: []Route{{Provider: p, Upstream: up, Key: realKey}}, Record: func(Event) {}})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g.Start(ln)
	tb.Cleanup(func() { _ = g.Close() })
	e := &benchEnv{
		direct: &http.Client{Transport: &http.Transport{
			Proxy:             nil,
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		}},
		viaGateway:  &http.Client{Transport: &http.Transport{Proxy: nil}},
		upstream:    srv.URL,
		gateway:     "http://" + ln.Addr().String() + "/anthropic",
		placeholder: g.PlaceholderFor("anthropic"),
	}
	tb.Cleanup(e.direct.CloseIdleConnections)
	tb.Cleanup(e.viaGateway.CloseIdleConnections)
	// Warm both paths up: connections, TLS sessions, buffers.
	for _, gw := range []bool{false, true} {
		for range 20 {
			e.json(tb, gw)
			e.sse(tb, gw)
		}
		e.large(tb, gw)
	}
	e.proto = "HTTP/1.1"
	if srv.EnableHTTP2 {
		e.proto = "HTTP/2"
	}
	return e
}

// do sends one request on the direct path or through the gateway.
func (e *benchEnv) do(tb testing.TB, gw bool, method, path, body string) *http.Response {
	base, c, key := e.upstream, e.direct, realKey
	if gw {
		base, c, key = e.gateway, e.viaGateway, e.placeholder
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tb.Fatalf("%s %s: %s: %s", method, base+path, resp.Status, b)
	}
	return resp
}

// json times a small JSON message, to the last byte of the response.
func (e *benchEnv) json(tb testing.TB, gw bool) time.Duration {
	t0 := time.Now()
	resp := e.do(tb, gw, http.MethodPost, "/v1/messages", benchRequest)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil || n != int64(len(benchJSON)) {
		tb.Fatalf("json: %d bytes, %v", n, err)
	}
	return d
}

// sse times an event stream's first byte, then reads it to its end.
func (e *benchEnv) sse(tb testing.TB, gw bool) time.Duration {
	var buf [4096]byte
	t0 := time.Now()
	resp := e.do(tb, gw, http.MethodPost, "/v1/stream", benchRequest)
	n, err := resp.Body.Read(buf[:])
	ttfb := time.Since(t0)
	if n == 0 {
		tb.Fatalf("sse: no first byte: %v", err)
	}
	rest, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf[:])
	resp.Body.Close()
	if err != nil || int(rest)+n != benchSSELen {
		tb.Fatalf("sse: %d bytes, %v", int(rest)+n, err)
	}
	return ttfb
}

// large reads the 64 MiB body and returns its rate in MB/s (10^6 bytes).
func (e *benchEnv) large(tb testing.TB, gw bool) float64 {
	buf := make([]byte, 64<<10)
	t0 := time.Now()
	resp := e.do(tb, gw, http.MethodGet, "/v1/large", "")
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil || n != benchStreamBytes {
		tb.Fatalf("large: %d bytes, %v", n, err)
	}
	return float64(n) / 1e6 / d.Seconds()
}

// percentile is the p-th percentile (0 < p <= 100) of d, nearest rank.
func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func benchLatency(b *testing.B, gw bool, f func(*benchEnv, testing.TB, bool) time.Duration, unit string) {
	e := newBenchEnv(b)
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, f(e, b, gw))
	}
	b.ReportMetric(us(percentile(ds, 50)), unit+"-p50-µs")
	b.ReportMetric(us(percentile(ds, 99)), unit+"-p99-µs")
}

func benchStream(b *testing.B, gw bool) {
	e := newBenchEnv(b)
	b.SetBytes(benchStreamBytes)
	var rates []float64
	for b.Loop() {
		rates = append(rates, e.large(b, gw))
	}
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2], "median-MB/s")
}

func BenchmarkDirectJSON(b *testing.B)  { benchLatency(b, false, (*benchEnv).json, "lat") }
func BenchmarkGatewayJSON(b *testing.B) { benchLatency(b, true, (*benchEnv).json, "lat") }
func BenchmarkDirectSSE(b *testing.B)   { benchLatency(b, false, (*benchEnv).sse, "ttfb") }
func BenchmarkGatewaySSE(b *testing.B)  { benchLatency(b, true, (*benchEnv).sse, "ttfb") }
func BenchmarkDirectStream(b *testing.B) {
	benchStream(b, false)
}
func BenchmarkGatewayStream(b *testing.B) { benchStream(b, true) }

// TestBenchLLM is make bench-llm (SODA_BENCH=1): the two paths in one
// run, request by request in alternating order; the table, with the
// ratios against the targets, is logged and written to
// SODA_BENCH_OUT. SODA_BENCH_N scales the number of requests.
func TestBenchLLM(t *testing.T) {
	if os.Getenv("SODA_BENCH") != "1" {
		t.Skip(testkit.BenchmarkOnly + " the model gateway benchmark runs with SODA_BENCH=1 (make bench-llm)")
	}
	scale := 1.0
	if s, err := strconv.ParseFloat(os.Getenv("SODA_BENCH_N"), 64); err == nil && s > 0 {
		scale = s
	}
	nJSON, nSSE, nLarge := int(3000*scale), int(1000*scale), max(int(10*scale), 3)
	e := newBenchEnv(t)

	paired := func(n int, f func(testing.TB, bool) time.Duration) (direct, gw []time.Duration) {
		for i := range n {
			for _, g := range []bool{i%2 == 0, i%2 != 0} {
				d := f(t, g)
				if g {
					gw = append(gw, d)
				} else {
					direct = append(direct, d)
				}
			}
		}
		return direct, gw
	}
	jd, jg := paired(nJSON, e.json)
	sd, sg := paired(nSSE, e.sse)
	var ld, lg []float64
	for i := range nLarge {
		for _, g := range []bool{i%2 == 0, i%2 != 0} {
			if r := e.large(t, g); g {
				lg = append(lg, r)
			} else {
				ld = append(ld, r)
			}
		}
	}
	slices.Sort(ld)
	slices.Sort(lg)

	r := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	added := func(a, b []time.Duration, p float64) time.Duration { return percentile(b, p) - percentile(a, p) }
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	ldm, lgm := ld[len(ld)/2], lg[len(lg)/2]
	lines := []string{
		"| figure | direct (TLS) | via the gateway | added / ratio | target |",
		"|---|---|---|---|---|",
		fmt.Sprintf("| small JSON message, p50 of %d | %s | %s | +%s | ≤ +1 ms: %s |", nJSON, r(percentile(jd, 50)), r(percentile(jg, 50)), r(added(jd, jg, 50)), mark(added(jd, jg, 50) <= time.Millisecond)),
		fmt.Sprintf("| small JSON message, p99 of %d | %s | %s | +%s | — |", nJSON, r(percentile(jd, 99)), r(percentile(jg, 99)), r(added(jd, jg, 99))),
		fmt.Sprintf("| event stream, time to first byte, p50 of %d | %s | %s | +%s | ≤ +1 ms: %s |", nSSE, r(percentile(sd, 50)), r(percentile(sg, 50)), r(added(sd, sg, 50)), mark(added(sd, sg, 50) <= time.Millisecond)),
		fmt.Sprintf("| event stream, time to first byte, p99 of %d | %s | %s | +%s | — |", nSSE, r(percentile(sd, 99)), r(percentile(sg, 99)), r(added(sd, sg, 99))),
		fmt.Sprintf("| 64 MiB body, MB/s, median of %d | %.0f | %.0f | %.2f | ≥ 0.50: %s |", nLarge, ldm, lgm, lgm/ldm, mark(lgm/ldm >= 0.5)),
		fmt.Sprintf("| 64 MiB body, MB/s, range | %.0f–%.0f | %.0f–%.0f | — | — |", ld[0], ld[len(ld)-1], lg[0], lg[len(lg)-1]),
	}
	head := fmt.Sprintf("%s · %s, GOMAXPROCS %d, %d CPUs · upstream %s over TLS on the loopback, client, gateway and upstream in one process",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), e.proto)
	t.Log(head)
	for _, l := range lines {
		t.Log(l)
	}
	if out := os.Getenv("SODA_BENCH_OUT"); out != "" {
		md := "# Model gateway against the direct path\n\n" + head + "\n\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
