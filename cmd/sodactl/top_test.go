//go:build !soda_lean

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/mcpd"
	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/token"
	"github.com/soda-project/soda/internal/top"
	"github.com/soda-project/soda/test/testkit"
)

// TestTopOnce runs sodactl top --once against a live soda-mcpd (mcpecho
// children) while a real MCP client (go-sdk) holds two sessions and calls,
// and a sandbox daemon's and a validation worker's textfiles: the screen shows the sessions, the
// children and the calls that GET /metrics reports, the sandboxes and their
// egress, in 80 columns.
func TestTopOnce(t *testing.T) {
	dir := t.TempDir()
	// soda-mcpd as root runs its children as an unprivileged user: the
	// server must be where that user can reach it.
	bin, err := os.MkdirTemp("", "soda-top-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	echo := filepath.Join(bin, "mcpecho")
	if out, err := exec.Command("go", "build", "-o", echo, "github.com/soda-project/soda/test/mcpecho").CombinedOutput(); err != nil {
		t.Fatalf("build mcpecho: %v\n%s", err, out)
	}
	runDir := filepath.Join(dir, "run")
	t.Setenv("RUNTIME_DIRECTORY", runDir)
	if err := os.MkdirAll(runDir, 0o750); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "state", "topt.token")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testkit.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- mcpd.Main(ctx, []string{"--name", "topt", "--listen", "127.0.0.1:0", "--token-file", tokFile, "--", echo}, &logs, &logs)
	}()
	var rec runstate.Record
	var tok string
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, _, err := runstate.Lookup("topt", []string{runDir})
		if err == nil && len(r.Listen) > 0 {
			rec = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no runtime record: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err = token.Read(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "top-test", Version: "1"}, nil)
	hc := &http.Client{Transport: testkit.Bearer{Token: tok}}
	for i := range 2 {
		s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + rec.Listen[0] + "/mcp", HTTPClient: hc}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer s.Close()
		for j := range 10 {
			if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i, j)}}); err != nil {
				t.Fatalf("call: %v", err)
			}
		}
	}
	// A sandbox daemon's textfile, as sodad --metrics-textfile writes it.
	textDir := filepath.Join(dir, "metrics")
	if err := os.MkdirAll(textDir, 0o755); err != nil {
		t.Fatal(err)
	}
	reg := metrics.NewRegistry("sodad", "test")
	sb := metrics.NewSandboxes(reg)
	sb.Started("a", time.Now())
	sb.Egress("connect", "allow", "connected")
	sb.Egress("connect", "deny", "not in allow list")
	sb.Egress("dns", "deny", "dns is not available in the sandbox; use the proxy")
	if err := reg.WriteTextfile(metrics.TextfilePath(textDir, "sodad")); err != nil {
		t.Fatal(err)
	}
	// And a validation worker's (soda-validated --metrics-textfile).
	vreg := metrics.NewRegistry("soda-validated", "test")
	vm := metrics.NewValidator(vreg, "sh")
	vm.Done("valid", time.Second)
	vm.Done("invalid", time.Second)
	vm.Done("invalid", time.Second)
	vm.Done("deadline", time.Minute)
	vm.Busy()
	if err := vreg.WriteTextfile(metrics.TextfilePath(textDir, "soda-validate@sh")); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"top", "--runtime-dir", runDir, "--textfile-dir", textDir, "--once", "--interval", "300ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("sodactl top --once: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	// The row holds what GET /metrics says (the go-sdk client speaks the
	// stateless revision here: one shared child, no sessions), no calls
	// in the interval, no refusal.
	m := scrapeSums(t, "http://"+rec.Listen[0]+"/metrics", tok)
	if m["soda_mcp_calls_total"] < 20 {
		t.Fatalf("soda_mcp_calls_total = %v, want at least the 20 calls", m["soda_mcp_calls_total"])
	}
	want := fmt.Sprintf(`(?m)^topt +%d +%d +0\.0 +- +0 +%d$`, int(m["soda_mcp_sessions"]), int(m["soda_mcp_children"]), int(m["soda_mcp_calls_total"]))
	if !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("the server's row: want %s:\n%s", want, out)
	}
	if !regexp.MustCompile(`(?m)^soda-validate@sh +1 +2 +1 +1 +0$`).MatchString(out) {
		t.Errorf("the validator's row: want 1 valid, 2 invalid, 1 without verdict, 1 busy:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^sodad +1 +1 +2$`).MatchString(out) {
		t.Errorf("the sandboxes row: want sodad 1 live, 1 allowed, 2 denied:\n%s", out)
	}
	cancel()
	<-exit
}

// scrapeSums are the families of GET /metrics, each summed over its
// series.
func scrapeSums(t *testing.T, url, tok string) map[string]float64 {
	t.Helper()
	sample := top.Read(context.Background(), http.DefaultClient, []top.Source{{Name: "scrape", URL: url, Token: tok}})
	if sample.Fams[0] == nil {
		t.Fatalf("scrape %s: %v", url, sample.Errs[0])
	}
	out := map[string]float64{}
	for name := range sample.Fams[0] {
		out[name] = sample.Fams[0].Sum(name, "", "")
	}
	return out
}
