package validate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTP: the worker over Streamable HTTP behind the listener's bounds,
// each with its status code; a whole validation with the go-sdk client.
func TestHTTP(t *testing.T) {
	requireSandbox(t)
	state, confDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "shellcheck.conf"), []byte(shellcheckConf), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", confDir, "--state-dir", state, "--allow-degraded", "cgroup",
		"--transport", "http", "--listen", addr, "shellcheck")
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{b: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", stderr.String())
		}
	})
	url := "http://" + addr + "/mcp"
	var tok string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, err := os.ReadFile(filepath.Join(state, "shellcheck", "token")); err == nil && len(strings.TrimSpace(string(b))) == 64 {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				tok = strings.TrimSpace(string(b))
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token or listener after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	do := func(method, path string, hdr map[string]string, body []byte) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	auth := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range auth {
			m[a] = b
		}
		m[k] = v
		return m
	}
	init := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	for _, c := range []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		body   []byte
		want   int
	}{
		{"no token", "POST", "/mcp", map[string]string{"Content-Type": "application/json"}, init, 401},
		{"wrong token", "POST", "/mcp", with("Authorization", "Bearer "+strings.Repeat("0", 64)), init, 401},
		{"no token on ready", "GET", "/ready", nil, nil, 401},
		{"ready", "GET", "/ready", auth, nil, 200},
		{"foreign Host", "POST", "/mcp", with("Host", "evil.example:80"), init, 403},
		{"an Origin, even loopback", "POST", "/mcp", with("Origin", "http://127.0.0.1"), init, 403},
		{"body over 2 MiB", "POST", "/mcp", auth, bytes.Repeat([]byte(" "), 2<<20+1), 413},
		{"headers over 16 KiB", "POST", "/mcp", with("X-Pad", strings.Repeat("a", 17<<10)), init, 431},
	} {
		if got := do(c.method, c.path, c.hdr, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{tok}}}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	defer cs.Close()
	v, text, isErr := validate(t, cs, [2]string{"a.sh", "#!/bin/bash\necho $1\n"})
	if isErr || v.Verdict == nil || *v.Verdict != "invalid" || len(v.Diagnostics) == 0 {
		t.Errorf("validate over HTTP: %+v\n%s", v, text)
	}
	// At most 8 sessions: the 9th initialize is refused.
	var extra []*mcp.ClientSession
	refused := false
	for i := 0; i < 9 && !refused; i++ {
		s, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprint("t", i), Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{tok}}}, nil)
		if err != nil {
			refused = strings.Contains(err.Error(), "503") || strings.Contains(err.Error(), "Service Unavailable") || strings.Contains(err.Error(), "sessions are open")
			if !refused {
				t.Errorf("session %d: %v", i+2, err)
			}
			break
		}
		extra = append(extra, s)
	}
	if !refused || len(extra) != 7 {
		t.Errorf("sessions: %d more admitted after the first, refused %v; want 7 more and the 9th refused", len(extra), refused)
	}
	for _, s := range extra {
		s.Close()
	}
}
