package main

import (
	"bytes"
	"strings"
	"testing"
)

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
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestRunCommandLine covers the refusals that happen before any sandbox
// is built: each is a usage error (exit 2) or a config error (exit 1) with
// a message that says what is wrong.
func TestRunCommandLine(t *testing.T) {
	f := newFixture(t)
	cd := "--config-dir=" + f.conf
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no command", []string{"run"}, exitUsage, "missing COMMAND"},
		{"bad memory", []string{"run", "--memory", "lots", "--", "true"}, exitUsage, "--memory: invalid size"},
		{"bad grant", []string{"run", "--allow", "example.com", "--", "true"}, exitUsage, "--allow example.com"},
		{"bracket grant", []string{"run", "--allow", "[::1]:80", "--", "true"}, exitUsage, "--allow [::1]:80"},
		{"bad layer", []string{"run", "--allow-degraded", "netns", "--", "true"}, exitUsage, "cannot be degraded"},
		{"env not set", []string{"run", "--env", "SODA_TEST_NOT_SET_ANYWHERE", "--", "true"}, exitUsage, "not set in sodactl's environment"},
		{"unknown mcp", []string{"run", cd, "--mcp", "nosuch", "--", "true"}, exitError, "no configuration for \"nosuch\""},
		{"mcp without token", []string{"run", cd, "--mcp", "gh", "--", "true"}, exitError, "no token yet for gh"},
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
			if tt.name == "help" && !strings.Contains(stdout.String(), "--allow-degraded") {
				t.Errorf("help lacks the options:\n%s", stdout.String())
			}
		})
	}
}
