package perrunmcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/agentmcp"
	"github.com/soda-project/soda/internal/child"
)

var echoBin string

func TestMain(m *testing.M) {
	// The test binary is the children's supervisor, as sodactl is.
	if child.IsGate() {
		child.RunGate()
	}
	dir, err := os.MkdirTemp("", "perrunmcp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "mcpecho")
	if out, err := exec.Command("go", "build", "-o", echoBin, "github.com/soda-project/soda/test/mcpecho").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build mcpecho: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func post(t *testing.T, url, tok string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestStartServeClose(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	set, err := Start(ctx, log, Options{Servers: []agentmcp.Server{
		{Name: "b", Transport: "stdio", Command: echoBin, Env: map[string]string{"API_KEY": "s3cret"}},
		{Name: "a", Transport: "stdio", Command: echoBin},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Servers) != 2 || set.Servers[0].Name != "a" {
		t.Fatalf("servers: %+v", set.Servers)
	}
	g := set.Grants()
	if g[0].Port == g[1].Port || g[0].Entry.Token == g[1].Entry.Token || len(g[0].Entry.Token) < 32 {
		t.Fatalf("each server needs its own port and token: %+v", g)
	}
	for _, gr := range g {
		if c := post(t, gr.Entry.URL, gr.Entry.Token); c != 200 {
			t.Errorf("%s: initialize with the token: %d", gr.Entry.Name, c)
		}
		if c := post(t, gr.Entry.URL, ""); c != 401 {
			t.Errorf("%s: initialize without the token: %d, want 401", gr.Entry.Name, c)
		}
		if c := post(t, gr.Entry.URL, g[0].Entry.Token+g[1].Entry.Token); c != 401 {
			t.Errorf("%s: a wrong token: %d, want 401", gr.Entry.Name, c)
		}
	}
	for _, s := range set.Servers {
		if n := s.bridge.Stats().Children; n != 1 {
			t.Errorf("%s: %d children while one session is open", s.Name, n)
		}
	}
	set.Close(ctx)
	for _, s := range set.Servers {
		if n := s.bridge.Stats().Children; n != 0 {
			t.Errorf("%s: %d children after Close", s.Name, n)
		}
		if c := post(t, s.Grant.Entry.URL, s.Grant.Entry.Token); c != 0 {
			t.Errorf("%s: still answering after Close: %d", s.Name, c)
		}
	}
}

func TestHealthCheck(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bad := agentmcp.Server{Name: "broken", Transport: "stdio", Command: "sh", Args: []string{"-c", "echo 'cannot reach the API: missing key' >&2; exit 3"}}
	good := agentmcp.Server{Name: "good", Transport: "stdio", Command: echoBin}
	missing := agentmcp.Server{Name: "nocmd", Transport: "stdio", Command: "soda-no-such-command"}
	silent := agentmcp.Server{Name: "silent", Transport: "stdio", Command: "sleep", Args: []string{"60"}}
	tests := []struct {
		name     string
		servers  []agentmcp.Server
		optional []string
		want     []string // in the error; none: Start succeeds
		skipped  int
	}{
		{"stderr tail", []agentmcp.Server{good, bad}, nil, []string{"MCP server broken failed its health check", "missing key"}, 0},
		{"optional skipped", []agentmcp.Server{good, bad}, []string{"broken"}, nil, 1},
		{"no command", []agentmcp.Server{missing}, nil, []string{"MCP server nocmd", "soda-no-such-command"}, 0},
		{"never answers", []agentmcp.Server{silent}, nil, []string{"MCP server silent", "initialize"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			set, err := Start(context.Background(), log, Options{Servers: tc.servers, Optional: tc.optional, StartTimeout: 2 * time.Second})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer set.Close(context.Background())
				if len(set.Skipped) != tc.skipped || len(set.Servers) != 1 {
					t.Fatalf("servers %d, skipped %+v", len(set.Servers), set.Skipped)
				}
				return
			}
			if err == nil {
				set.Close(context.Background())
				t.Fatal("Start succeeded")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("not an *Error: %T", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if d := time.Since(t0); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

// TestFailingServerStderrEveryTime: a server that writes its reason and
// exits at once is reported with it on every try, however fast it dies
// (it used to lose the race now and then: "session ended").
func TestFailingServerStderrEveryTime(t *testing.T) {
	for i := range 10 {
		_, err := Start(context.Background(), slog.New(slog.DiscardHandler), Options{Servers: []agentmcp.Server{{
			Name: "broken", Transport: "stdio", Command: "sh", Args: []string{"-c", "echo 'broken: cannot reach the database' >&2; exit 3"},
		}}, StartTimeout: 5 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "broken: cannot reach the database") {
			t.Fatalf("try %d: err = %v, want the server's stderr", i, err)
		}
	}
}

// TestFirstUse: with FirstUse, Start checks only the optional servers;
// each required one starts a child at once, which the first session
// takes (one child per server, not a probe's and a session's), and a
// failure (the child dies, with its stderr) comes on Failures.
func TestFirstUse(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	good := agentmcp.Server{Name: "good", Transport: "stdio", Command: echoBin}
	bad := agentmcp.Server{Name: "broken", Transport: "stdio", Command: "sh", Args: []string{"-c", "echo 'cannot reach the API: missing key' >&2; exit 3"}}
	optionalBad := agentmcp.Server{Name: "maybe", Transport: "stdio", Command: "sh", Args: []string{"-c", "exit 4"}}
	set, err := Start(ctx, log, Options{Servers: []agentmcp.Server{good, bad, optionalBad}, Optional: []string{"maybe"}, FirstUse: true, StartTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Start: %v (a required server's failure comes later, on Failures)", err)
	}
	defer set.Close(ctx)
	if len(set.Skipped) != 1 || set.Skipped[0].Name != "maybe" {
		t.Errorf("the optional server was not checked before Start returned: skipped %+v", set.Skipped)
	}
	select {
	case err := <-set.Failures():
		var e *Error
		if !errors.As(err, &e) || e.Name != "broken" || !strings.Contains(err.Error(), "missing key") {
			t.Errorf("failure %v, want broken's with its stderr", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failure for the broken server in 10 s")
	}
	var g *Server
	for _, s := range set.Servers {
		if s.Name == "good" {
			g = s
		}
	}
	if c := post(t, g.Grant.Entry.URL, g.Grant.Entry.Token); c != 200 {
		t.Fatalf("good: initialize: %d", c)
	}
	if st := g.bridge.Stats(); st.Children != 1 || st.SessionsStarted != 1 {
		t.Errorf("good after its first session: %+v, want the one child it started ahead", st)
	}
	// The good server's first use passed: nothing more comes.
	select {
	case err := <-set.Failures():
		t.Errorf("another failure: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := set.Failed(); err == nil || !strings.Contains(err.Error(), "MCP server broken failed its health check") {
		t.Errorf("Failed: %v", err)
	}
	set.Close(ctx)
	for _, s := range set.Servers {
		if n := s.bridge.Stats().Children; n != 0 {
			t.Errorf("%s: %d children after Close", s.Name, n)
		}
	}
}
