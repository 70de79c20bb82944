package main

import (
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/agentmcp"
)

// TestStartNotices: a host server that a package runner starts gets a
// line before the run waits for it (the runner may download its package
// first, silently); one started directly gets none.
func TestStartNotices(t *testing.T) {
	tests := []struct {
		command string
		args    []string
		want    string // the runner named, "" for no line
	}{
		{"npx", []string{"-y", "@modelcontextprotocol/server-everything"}, "npx"},
		{"/usr/bin/npx", []string{"-y", "pkg"}, "npx"},
		{"uvx", []string{"mcp-server-git"}, "uvx"},
		{"bunx", []string{"pkg"}, "bunx"},
		{"pnpm", []string{"dlx", "pkg"}, "pnpm dlx"},
		{"npm", []string{"exec", "pkg"}, "npm exec"},
		{"yarn", []string{"dlx", "pkg"}, "yarn dlx"},
		{"bun", []string{"x", "pkg"}, "bun x"},
		{"npm", []string{"start"}, ""},
		{"node", []string{"server.js"}, ""},
		{"/opt/jira-mcp/bin/server", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.command+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			lines := startNotices([]agentmcp.Server{{Name: "srv", Command: tt.command, Args: tt.args, Transport: "stdio"}})
			if tt.want == "" {
				if len(lines) != 0 {
					t.Errorf("lines %q, want none", lines)
				}
				return
			}
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "sodactl: MCP server srv: starting on the host ("+tt.want+" may download") ||
				!strings.Contains(lines[0], "up to 60 s") {
				t.Errorf("lines %q, want one naming %s and the wait", lines, tt.want)
			}
		})
	}
}
