package mcpd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/version"
)

// echoBin is the mcpecho fixture, built once in TestMain.
var echoBin string

func TestMain(m *testing.M) {
	// Main runs in this process in some tests: the test binary must serve
	// as the children's supervisor, as soda-mcpd does.
	if child.IsGate() {
		child.RunGate()
	}
	dir, err := os.MkdirTemp("", "soda-mcpd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Run as root, soda-mcpd runs its children as an unprivileged user,
	// who must reach the fixtures.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "mcpecho")
	out, err := exec.Command("go", "build", "-o", echoBin, "github.com/soda-project/soda/test/mcpecho").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build mcpecho: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMainExitCodes covers the command lines that fail or finish before a
// server is started.
func TestMainExitCodes(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.conf")
	writeFile(t, broken, "[Server]\nExecStart=/bin/true\n\n[Bridge]\nIdleTimeout=soon\n")
	public := filepath.Join(dir, "public.conf")
	writeFile(t, public, "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=0.0.0.0:18100\n")
	confDir := filepath.Join(dir, "etc")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(confDir, "jira.conf"), "[Server]\nExecStart=/bin/true\nColour=blue\n")
	good := filepath.Join(dir, "good.conf")
	writeFile(t, good, "[Server]\nExecStart=/bin/true\n")
	badName := filepath.Join(dir, "bad name.conf")
	writeFile(t, badName, "[Server]\nExecStart=/bin/true\n")

	tests := []struct {
		name       string
		args       []string
		want       int
		wantStdout string   // substring of stdout
		wantStderr []string // substrings of stderr
	}{
		{name: "no args", args: nil, want: 2, wantStderr: []string{"give exactly one of NAME, --config FILE or -- COMMAND"}},
		{name: "NAME and command", args: []string{"jira", "--", "true"}, want: 2, wantStderr: []string{"give exactly one of"}},
		{name: "config and command", args: []string{"--config", broken, "--", "true"}, want: 2, wantStderr: []string{"give exactly one of"}},
		{name: "NAME and config", args: []string{"--config", broken, "jira"}, want: 2, wantStderr: []string{"give exactly one of"}},
		{name: "two names", args: []string{"a", "b"}, want: 2, wantStderr: []string{"give exactly one of"}},
		{name: "empty command after --", args: []string{"--"}, want: 2, wantStderr: []string{"give exactly one of"}},
		{name: "version", args: []string{"--version"}, want: 0, wantStdout: "soda-mcpd " + version.Version},
		{name: "version wins over missing source", args: []string{"-version", "jira", "--", "x"}, want: 0, wantStdout: "soda-mcpd"},
		{name: "help", args: []string{"--help"}, want: 0, wantStderr: []string{"Usage:", "-listen"}},
		{name: "unknown flag", args: []string{"--bogus", "--", "true"}, want: 2, wantStderr: []string{"flag provided but not defined: -bogus"}},
		{
			name: "broken config file", args: []string{"--config", broken}, want: 1,
			wantStderr: []string{"soda-mcpd: " + broken + ":5: Bridge.IdleTimeout: ", "not a time span"},
		},
		{
			name: "non-loopback Listen in config file", args: []string{"--config", public}, want: 1,
			wantStderr: []string{public + ":4: Bridge.Listen: ", "not a loopback address"},
		},
		{name: "missing config file", args: []string{"--config", filepath.Join(dir, "absent.conf")}, want: 1, wantStderr: []string{"read config", "absent.conf"}},
		{name: "config file with bad instance name", args: []string{"--config", badName}, want: 1, wantStderr: []string{`"bad name"`}},
		{
			name: "broken config found by NAME", args: []string{"--config-dir", confDir, "jira"}, want: 1,
			wantStderr: []string{filepath.Join(confDir, "jira.conf") + ":3: Server.Colour: unknown key"},
		},
		{name: "invalid NAME", args: []string{"../etc/passwd"}, want: 2, wantStderr: []string{"may only hold letters"}},
		{name: "invalid --name", args: []string{"--name", "a b", "--", "true"}, want: 2, wantStderr: []string{`"a b"`}},
		{name: "non-loopback --listen", args: []string{"--listen", "0.0.0.0:1", "--", "true"}, want: 2, wantStderr: []string{"Bridge.Listen", "not a loopback address"}},
		{name: "private --listen", args: []string{"--listen", "10.0.0.1:80", "--", "true"}, want: 2, wantStderr: []string{"not a loopback address"}},
		{name: "non-loopback --listen over a good config", args: []string{"--config", good, "--listen", "0.0.0.0:1"}, want: 2, wantStderr: []string{"Bridge.Listen", "not a loopback address"}},
		{name: "bad --idle-timeout", args: []string{"--idle-timeout", "soon", "--", "true"}, want: 2, wantStderr: []string{"--idle-timeout", "not a time span"}},
		{name: "bad --call-timeout", args: []string{"--call-timeout", "0", "--", "true"}, want: 2, wantStderr: []string{"--call-timeout", "must be positive"}},
		{name: "negative --max-sessions", args: []string{"--max-sessions", "-1", "--", "true"}, want: 2, wantStderr: []string{"--max-sessions must be positive"}},
		{name: "bad --log-level", args: []string{"--log-level", "loud", "--", "true"}, want: 2, wantStderr: []string{`--log-level "loud"`}},
		{name: "bad --log-format", args: []string{"--log-format", "xml", "--", "true"}, want: 2, wantStderr: []string{`--log-format "xml"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := Main(ctx, tt.args, &stdout, &stderr)
			if got != tt.want {
				t.Errorf("Main(%q) = %d, want %d\nstdout: %s\nstderr: %s", tt.args, got, tt.want, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("Main(%q) stdout %q does not contain %q", tt.args, stdout.String(), tt.wantStdout)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("Main(%q) stderr does not contain %q:\n%s", tt.args, w, stderr.String())
				}
			}
			leaked := strings.Contains(stderr.String(), "soda-mcpd: usage: ")
			if leaked {
				t.Errorf("Main(%q) stderr shows the internal \"usage: \" prefix:\n%s", tt.args, stderr.String())
			}
		})
	}
}

// TestMainServe runs a real bridge on an ephemeral loopback port and stops it
// by cancelling the context.
func TestMainServe(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "state", "adhoc.token")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"--listen", "127.0.0.1:0", "--token-file", tokFile, "--log-format", "json", "--", echoBin}
	exit := make(chan int, 1)
	go func() { exit <- Main(ctx, args, &stdout, &stderr) }()

	// Wait for the "serving" log line.
	var serving map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for serving == nil {
		select {
		case code := <-exit:
			t.Fatalf("Main returned %d before serving; stderr:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"serving\" log line within 10s; stderr:\n%s", stderr.String())
		}
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("--log-format json wrote a non-JSON line %q: %v", sc.Text(), err)
			}
			if rec["msg"] == "serving" {
				serving = rec
			}
		}
		if serving == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The token file is 64 lowercase hex characters with mode 0640.
	data, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatalf("token file: %v", err)
	}
	tok := strings.TrimSuffix(string(data), "\n")
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Errorf("token file holds %q, want 64 lowercase hex characters", data)
	}
	fi, err := os.Stat(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o640 {
		t.Errorf("token file mode = %#o, want 0640", mode)
	}

	// The log line tells where to connect, and the endpoint answers.
	checks := map[string]any{"server": "adhoc", "auth": true, "token_file": tokFile, "command": echoBin}
	for k, want := range checks {
		if serving[k] != want {
			t.Errorf("serving log %s = %v, want %v", k, serving[k], want)
		}
	}
	u, _ := serving["url"].(string)
	if !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/mcp") {
		t.Fatalf("serving log url = %q, want http://127.0.0.1:PORT/mcp", u)
	}
	ready := strings.TrimSuffix(u, "/mcp") + "/ready"
	client := &http.Client{Timeout: 5 * time.Second}
	for _, c := range []struct {
		name string
		auth string
		want int
	}{
		{"without token", "", http.StatusUnauthorized},
		{"with token", "Bearer " + tok, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, ready, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s %s: %v", ready, c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s %s: status %d, want %d", ready, c.name, resp.StatusCode, c.want)
		}
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("Main returned %d after cancel, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Main did not return within 5s of cancel; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line; stderr:\n%s", stderr.String())
	}
}
