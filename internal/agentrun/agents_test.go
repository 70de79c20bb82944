package agentrun

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/mcpgrant"
)

const (
	tok         = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	sandboxHome = "/home/agent"
)

var grants = []mcpgrant.Grant{
	{Entry: clientconfig.Server{Name: "jira", URL: "http://127.0.0.1:18101/mcp", Token: tok}, Port: 18101},
	{Entry: clientconfig.Server{Name: "open", URL: "http://127.0.0.1:18103/mcp"}, Port: 18103},
}

// TestAgentArgv: Claude Code gets its MCP configuration as one word
// (--mcp-config is variadic in Claude Code: "--mcp-config FILE" followed
// by a prompt read the prompt as a second file), before the user's
// arguments, which are kept in order; other agents run unchanged.
func TestAgentArgv(t *testing.T) {
	const cfg = "/home/agent/.soda/mcp.json"
	tests := []struct {
		argv, want []string
	}{
		{[]string{"claude", "fix the bug"}, []string{"claude", "--mcp-config=" + cfg, "fix the bug"}},
		{[]string{"/usr/local/bin/claude", "mcp", "list"}, []string{"/usr/local/bin/claude", "--mcp-config=" + cfg, "mcp", "list"}},
		{[]string{"claude"}, []string{"claude", "--mcp-config=" + cfg}},
		{[]string{"codex", "fix the bug"}, []string{"codex", "fix the bug"}},
		{[]string{"opencode"}, []string{"opencode"}},
		{[]string{"/opt/claude/bin/node", "claude"}, []string{"/opt/claude/bin/node", "claude"}},
		{[]string{}, []string{}},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.argv)
		got := agentArgv(tt.argv, cfg)
		if !slices.Equal(got, tt.want) {
			t.Errorf("agentArgv(%q) = %q, want %q", tt.argv, got, tt.want)
		}
		if !slices.Equal(tt.argv, in) {
			t.Errorf("agentArgv changed its argument: %q", tt.argv)
		}
		for i, a := range got {
			if a == "--mcp-config" && i+1 < len(got) {
				t.Errorf("agentArgv(%q): --mcp-config as its own word swallows %q", tt.argv, got[i+1:])
			}
		}
	}
}

func TestWriteAgents(t *testing.T) {
	tests := []struct {
		name      string
		argv      []string
		grants    []mcpgrant.Grant
		wantArgv  []string
		wantFiles bool
	}{
		{"claude", []string{"claude", "-p", "hi"}, grants, []string{"claude", "--mcp-config=/home/agent/.soda/mcp.json", "-p", "hi"}, true},
		{"codex", []string{"codex"}, grants, []string{"codex"}, true},
		{"no grants", []string{"claude"}, nil, []string{"claude"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			s, err := writeAgents(home, sandboxHome, tt.argv, tt.grants)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Argv, tt.wantArgv) {
				t.Errorf("Argv = %q, want %q", s.Argv, tt.wantArgv)
			}
			if !tt.wantFiles {
				if es, _ := os.ReadDir(home); len(es) != 0 || len(s.Env) != 0 {
					t.Errorf("no grants: wrote %v, env %q", es, s.Env)
				}
				return
			}
			if want := []string{"SODA_MCP_CONFIG=/home/agent/.soda/mcp.json"}; !slices.Equal(s.Env, want) {
				t.Errorf("Env = %q, want %q", s.Env, want)
			}
			for _, p := range []string{".soda/mcp.json", ".claude.json", ".codex/config.toml", ".config/opencode/opencode.json"} {
				fi, err := os.Stat(filepath.Join(home, p))
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
				}
				b, _ := os.ReadFile(filepath.Join(home, p))
				if !strings.Contains(string(b), "http://127.0.0.1:18101/mcp") || !strings.Contains(string(b), tok) || !strings.Contains(string(b), "18103") {
					t.Errorf("%s lacks a grant:\n%s", p, b)
				}
			}
		})
	}
}

// TestWriteAgentsStaysInHome: a home holding a symbolic link out of it (where
// an agent's configuration goes) gets nothing written through the link.
func TestWriteAgentsStaysInHome(t *testing.T) {
	home, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home, ".codex")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "claude.json"), filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := writeAgents(home, sandboxHome, []string{"claude"}, grants); err == nil {
		t.Error("Write followed a link out of the home without an error")
	}
	if es, _ := os.ReadDir(outside); len(es) != 0 {
		t.Errorf("written outside the home: %v", es)
	}
}
