package mcpbridge_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/mcpbridge"
)

// bearer adds the token to every request of the go-sdk client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func (h *harness) sdkHTTPClient() *http.Client {
	return &http.Client{Transport: bearer{h.Token, http.DefaultTransport}}
}

// TestGoSDKEachRevision connects the go-sdk client, pinned to each revision
// it supports, through the bridge to server-everything and to mcpecho.
// TestSupportedVersionsAreGoSDKs holds the bridge's written-out list of
// protocol revisions to go-sdk's: a go-sdk update that adds or drops one
// fails here until the bridge's list follows.
func TestSupportedVersionsAreGoSDKs(t *testing.T) {
	if got, want := mcpbridge.SupportedVersions(), mcp.SupportedProtocolVersions(); !slices.Equal(got, want) {
		t.Fatalf("mcpbridge.SupportedVersions() = %q, go-sdk's mcp.SupportedProtocolVersions() = %q: update supportedVersions in bridge.go", got, want)
	}
}

func TestGoSDKEachRevision(t *testing.T) {
	children := map[string][]string{"mcpecho": {echoBin}, "server-everything": everythingCmd(t)}
	for name, argv := range children {
		h := newHarness(t, harnessOpts{argv: argv})
		for _, v := range mcpbridge.SupportedVersions() {
			t.Run(name+"/"+v, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, nil)
				tr := &mcp.StreamableClientTransport{Endpoint: h.URL, HTTPClient: h.sdkHTTPClient(), MaxRetries: -1}
				cs, err := client.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: v})
				if err != nil {
					t.Fatalf("connect with %s: %v", v, err)
				}
				defer cs.Close()
				if got := cs.InitializeResult().ProtocolVersion; got != v {
					t.Fatalf("negotiated %s, want %s", got, v)
				}
				tools, err := cs.ListTools(ctx, nil)
				if err != nil || len(tools.Tools) == 0 {
					t.Fatalf("tools/list: %v %v", err, tools)
				}
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello " + v, "text": "hello " + v}})
				if err != nil {
					t.Fatalf("tools/call: %v", err)
				}
				if txt := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "hello "+v) {
					t.Fatalf("echo answered %q", txt)
				}
				if v >= "2026-07-28" {
					return // ping is one of the methods 2026-07-28 removed
				}
				if err := cs.Ping(ctx, nil); err != nil {
					t.Fatalf("ping: %v", err)
				}
			})
		}
	}
}

// TestGoSDKLegacySSE uses the go-sdk's HTTP+SSE (2024-11-05) client.
func TestGoSDKLegacySSE(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: everythingCmd(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.SSEClientTransport{Endpoint: h.Base + "/sse", HTTPClient: h.sdkHTTPClient()}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "legacy"}})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "legacy") {
		t.Fatalf("echo answered %q", txt)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) == 0 {
		t.Fatalf("prompts/list: %v", err)
	}
	cs.Close()
	waitFor(t, 5*time.Second, "legacy session gone", func() bool { return h.Bridge.Stats().Sessions == 0 })
}

// TestGoSDKProgressWithoutGET: progress notifications of a call reach a
// client that holds no GET stream, on the call's own POST stream.
func TestGoSDKProgressWithoutGET(t *testing.T) {
	h := newHarness(t, harnessOpts{argv: everythingCmd(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var progress atomic.Int32
	client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
	})
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL, HTTPClient: h.sdkHTTPClient(), DisableStandaloneSSE: true, MaxRetries: -1}
	cs, err := client.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 4}}
	params.SetProgressToken("tok-1")
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatalf("long-running operation: %v", err)
	}
	if n := progress.Load(); n < 2 {
		t.Fatalf("got %d progress notifications, want >= 2", n)
	}
}

// TestLeak opens and closes 2,000 sessions with 20,000 calls, then checks
// that goroutines, open files and child processes are back to baseline.
func TestLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("leak test is long; run without -short")
	}
	baseG := runtime.NumGoroutine()
	baseFD := openFDs()
	baseP := descendants()
	h := newHarness(t, harnessOpts{maxSessions: 8})
	const sessions, callsPer, workers = 2000, 10, 8
	var wg sync.WaitGroup
	var failures atomic.Int32
	var calls atomic.Int32
	jobs := make(chan int)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for range jobs {
				r := h.post("", fmt.Sprintf(initBody, "2025-11-25"))
				sid := r.Header.Get("Mcp-Session-Id")
				if r.Status != 200 || sid == "" {
					failures.Add(1)
					continue
				}
				h.post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				for c := range callsPer {
					if r := h.echo(sid, c+1, "leak"); r.response(float64(c+1)) == nil {
						failures.Add(1)
					}
					calls.Add(1)
				}
				if st := h.delete(sid); st != 204 {
					failures.Add(1)
				}
			}
		})
	}
	for i := range sessions {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if f := failures.Load(); f > 0 {
		t.Fatalf("%d failures", f)
	}
	waitFor(t, 10*time.Second, "all sessions gone", func() bool { return h.Bridge.Stats().Sessions == 0 })
	waitFor(t, 10*time.Second, "child processes back to baseline", func() bool { return descendants() == baseP })
	started := h.Bridge.Stats().SessionsStarted
	h.stop()
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, 10*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseG })
	waitFor(t, 10*time.Second, "fds back to baseline", func() bool { return openFDs() <= baseFD })
	t.Logf("%d sessions, %d calls in %s (%.0f sessions/s); goroutines %d→%d, fds %d→%d, children %d→%d",
		started, calls.Load(), elapsed.Round(time.Millisecond), float64(started)/elapsed.Seconds(),
		baseG, runtime.NumGoroutine(), baseFD, openFDs(), baseP, descendants())
	if started != sessions {
		t.Fatalf("started %d sessions, want %d", started, sessions)
	}
}
