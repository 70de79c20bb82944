package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/child"
)

// TestMain lets the test binary be the gate of supervised children (the
// per-run servers of --mcp-config), as sodactl's main does.
func TestMain(m *testing.M) {
	if child.IsGate() {
		child.RunGate()
	}
	os.Exit(m.Run())
}

// mcpConfigFile writes an MCP configuration named name in a new
// directory and returns its path.
func mcpConfigFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"", 0, false},
		{"1048576", 1 << 20, false},
		{"512M", 512 << 20, false},
		{"2G", 2 << 30, false},
		{"1.5G", 3 << 29, false},
		{"64k", 64 << 10, false},
		{"0", 0, true},
		{"-1G", 0, true},
		{"lots", 0, true},
		{"G", 0, true},
		// sodactl's own parser (floats) used to accept these, NAME.conf not:
		{"1e3G", 0, true},
		{"99999999999T", 0, true}, // used to overflow to a negative size
		{"inf", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestRunCommandLine covers the refusals that happen before any sandbox
// is built. Each exits 125, as sodactl(1) says: sodactl run keeps 1 and 2
// (and every other status below 125) for COMMAND's own exit statuses, so
// its own failures, the command line included, never look like COMMAND's.
// The message says what is wrong.
func TestRunCommandLine(t *testing.T) {
	f := newFixture(t)
	cd := "--config-dir=" + f.conf
	conf := mcpConfigFile(t, ".mcp.json", `{"mcpServers": {"gh": {"command": "true"}, "remote": {"url": "https://mcp.example.com/mcp"}}}`)
	failing := mcpConfigFile(t, ".mcp.json", `{"mcpServers": {"db": {"command": "sh", "args": ["-c", "echo 'db: no credentials' >&2; exit 1"]}}}`)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no command", []string{"run"}, 125, "missing COMMAND"},
		{"unknown option", []string{"run", "--frob", "--", "true"}, 125, "flag provided but not defined: -frob"},
		{"option without value", []string{"run", "--memory"}, 125, "flag needs an argument: -memory"},
		{"bad tasks", []string{"run", "--tasks", "many", "--", "true"}, 125, "-tasks"},
		{"bad memory", []string{"run", "--memory", "lots", "--", "true"}, 125, "--memory: \"lots\" is not a size"},
		{"bad tmp size", []string{"run", "--tmp-size", "0", "--", "true"}, 125, "--tmp-size: \"0\" is not a size"},
		{"bad grant", []string{"run", "--allow", "bad", "--", "true"}, 125, "--allow bad"},
		{"grant without port", []string{"run", "--allow", "example.com", "--", "true"}, 125, "--allow example.com"},
		{"bracket grant", []string{"run", "--allow", "[::1]:80", "--", "true"}, 125, "--allow [::1]:80"},
		{"bad private grant", []string{"run", "--allow-private", "bad", "--", "true"}, 125, "--allow-private bad"},
		{"no network with a grant", []string{"run", "--no-network", "--allow", "example.com:443", "--", "true"}, 125, "--no-network excludes"},
		{"no network with mcp", []string{"run", "--no-network", cd, "--mcp", "gh", "--", "true"}, 125, "--no-network excludes"},
		{"bad layer", []string{"run", "--allow-degraded", "netns", "--", "true"}, 125, "cannot be degraded"},
		{"env not set", []string{"run", "--env", "SODA_TEST_NOT_SET_ANYWHERE", "--", "true"}, 125, "not set in sodactl's environment"},
		{"unknown mcp", []string{"run", cd, "--mcp", "nosuch", "--", "true"}, 125, "no server \"nosuch\": " + f.conf + "/nosuch.conf does not exist, and no soda-mcpd of that name is running"},
		{"invalid mcp name", []string{"run", cd, "--mcp", "../etc", "--", "true"}, 125, "may only hold"},
		{"mcp without token", []string{"run", cd, "--mcp", "gh", "--", "true"}, 125, "no token yet for gh"},
		{"mcp malformed token", []string{"run", cd, "--mcp", "bad", "--", "true"}, 125, "bad.token"},
		{"mcp broken config", []string{"run", cd, "--mcp", "broken", "--", "true"}, 125, "invalid configuration"},
		{"mcp-inside without mcp-config", []string{"run", "--mcp-inside", "gh", "--", "true"}, 125, "name servers of --mcp-config FILE"},
		{"mcp-config missing", []string{"run", "--direct", "--mcp-config", "/nonexistent/.mcp.json", "--", "true"}, 125, "--mcp-config: open /nonexistent/.mcp.json"},
		{"mcp-config a directory", []string{"run", "--direct", "--mcp-config", t.TempDir(), "--", "true"}, 125, "not a regular file"},
		{"mcp-config not MCP", []string{"run", "--direct", "--mcp-config", mcpConfigFile(t, "x.json", `{"a": 1}`), "--", "true"}, 125, "no MCP servers found"},
		{"mcp-config unset variable", []string{"run", "--direct", "--mcp-config", mcpConfigFile(t, ".mcp.json", `{"mcpServers": {"s": {"command": "x", "env": {"K": "${SODA_TEST_NOT_SET_ANYWHERE}"}}}}`), "--", "true"}, 125, "${SODA_TEST_NOT_SET_ANYWHERE} is not set"},
		{"mcp-inside unknown", []string{"run", "--direct", "--mcp-config", conf, "--mcp-inside", "nosuch", "--", "true"}, 125, `no MCP server "nosuch" in the configuration (it has gh, remote)`},
		{"mcp-inside remote", []string{"run", "--direct", "--mcp-config", conf, "--mcp-inside", "remote", "--", "true"}, 125, "only a stdio server can run inside"},
		{"mcp-optional unknown", []string{"run", "--direct", "--mcp-config", conf, "--mcp-optional", "nosuch", "--", "true"}, 125, `no MCP server "nosuch"`},
		{"mcp and mcp-config", []string{"run", "--direct", cd, "--mcp", "gh", "--mcp-config", conf, "--", "true"}, 125, "--mcp gh and --mcp-config " + conf + " both name gh"},
		{"no network with mcp-config", []string{"run", "--no-network", "--mcp-config", conf, "--", "true"}, 125, "--no-network excludes"},
		// Checked before the command (first-use checks need the sandbox:
		// test/sandbox TestMCPConfig).
		{"mcp-config server fails", []string{"run", "--direct", "--mcp-check", "before", "--mcp-config", failing, "--", "true"}, 125, "MCP server db failed its health check"},
		{"mcp-check unknown", []string{"run", "--direct", "--mcp-check", "later", "--mcp-config", conf, "--", "true"}, 125, `--mcp-check "later": want first-use or before`},
		{"help", []string{"run", "--help"}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantErr)
			}
			if tt.name == "mcp-config server fails" && !strings.Contains(stderr.String(), "db: no credentials") {
				t.Errorf("the error lacks the server's stderr: %q", stderr.String())
			}
			if tt.wantCode != exitOK && strings.Count(stderr.String(), "sodactl: ") != 1 {
				t.Errorf("want one error line, got %q", stderr.String())
			}
			if tt.name == "help" && (!strings.Contains(stdout.String(), "--allow-degraded") || !strings.Contains(stdout.String(), "--no-network") || !strings.Contains(stdout.String(), "--mcp-config FILE")) {
				t.Errorf("help lacks the options:\n%s", stdout.String())
			}
		})
	}
}
