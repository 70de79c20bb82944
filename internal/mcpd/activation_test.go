package mcpd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSocketActivation runs soda-mcpd under systemd-socket-activate (the
// same LISTEN_FDS protocol as a .socket unit): nothing runs before the
// first connection, both passed sockets (TCP and Unix) serve MCP, and the
// Listen= address of the config is never bound.
func TestSocketActivation(t *testing.T) {
	ssa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatalf("systemd-socket-activate not found (apt-get install systemd): %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "soda-mcpd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/soda-project/soda/cmd/soda-mcpd").CombinedOutput(); err != nil {
		t.Fatalf("build soda-mcpd: %v\n%s", err, out)
	}
	port := freePort(t)
	unused := freePort(t)
	sock := filepath.Join(dir, "mcp.sock")
	conf := filepath.Join(dir, "act.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("[Server]\nExecStart=%s\n[Bridge]\nListen=127.0.0.1:%d\nTokenFile=%s/tok\n", echoBin, unused, dir)), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, ssa, "-l", fmt.Sprintf("127.0.0.1:%d", port), "-l", sock, "--fdname=tcp:unix",
		"-E", "JOURNAL_STREAM=", bin, "--config", conf, "--log-format", "json")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// systemd-socket-activate listens first and starts soda-mcpd on the first connection.
	waitListening(t, fmt.Sprintf("127.0.0.1:%d", port))
	if _, err := os.Stat(filepath.Join(dir, "tok")); err == nil {
		t.Fatal("soda-mcpd ran before the first connection")
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(c *http.Client, url, tok string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// The first connection starts soda-mcpd; it has no token yet to check
	// against, so this request is refused (401) but proves activation.
	resp, _ := post(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), "")
	if resp.StatusCode != 401 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	tokb, err := os.ReadFile(filepath.Join(dir, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(tokb))
	if resp, b := post(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), tok); resp.StatusCode != 200 || !strings.Contains(b, "mcpecho") {
		t.Fatalf("TCP: %d %s", resp.StatusCode, b)
	}
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if resp, b := post(unix, "http://localhost/mcp", tok); resp.StatusCode != 200 || !strings.Contains(b, "mcpecho") {
		t.Fatalf("Unix socket: %d %s", resp.StatusCode, b)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", unused), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("soda-mcpd bound Listen= although it was socket-activated")
	}
	found := false
	for l := range lines {
		if strings.Contains(l, `"msg":"serving"`) {
			if !strings.Contains(l, `"socket_activated":true`) || !strings.Contains(l, "unix:"+sock) {
				t.Fatalf("serving record: %s", l)
			}
			found = true
			break
		}
	}
	if !found {
		t.Fatal("no serving record")
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitListening(t *testing.T, addr string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// Probe without connecting: a connect would trigger activation.
		if b, _ := os.ReadFile("/proc/net/tcp"); strings.Contains(strings.ToUpper(string(b)), fmt.Sprintf(":%04X 00000000:0000 0A", portOf(addr))) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s not listening", addr)
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	var n int
	fmt.Sscan(p, &n)
	return n
}
