package generator

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandArgs(t *testing.T) {
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "jira.conf"), []byte("[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18101\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := func() string { return t.TempDir() }
	tests := []struct {
		name      string
		args      []string
		code      int
		stdoutHas string
		stderrHas string
		generated bool // args[0]/soda-mcp@jira.socket.d exists
	}{
		{name: "help", args: []string{"--help"}, code: 0, stdoutHas: "Usage: soda-generator NORMAL-DIR [EARLY-DIR LATE-DIR]"},
		{name: "-h", args: []string{"-h"}, code: 0, stdoutHas: "soda-generator(8)"},
		{name: "version", args: []string{"--version"}, code: 0, stdoutHas: "soda-generator "},
		{name: "no args", args: nil, code: 2, stderrHas: "want 1 or 3 output directories"},
		{name: "two args", args: []string{dir(), dir()}, code: 2, stderrHas: "got 2 arguments"},
		{name: "four args", args: []string{dir(), dir(), dir(), dir()}, code: 2, stderrHas: "got 4 arguments"},
		{name: "unknown option", args: []string{"--frob"}, code: 2, stderrHas: `unknown option "--frob"`},
		{name: "option among dirs", args: []string{dir(), "-x", dir()}, code: 2, stderrHas: `unknown option "-x"`},
		{name: "relative dir", args: []string{"out"}, code: 2, stderrHas: "not an absolute path"},
		{name: "one dir", args: []string{dir()}, code: 0, generated: true},
		{name: "three dirs", args: []string{dir(), dir(), dir()}, code: 0, generated: true},
		{name: "unwritable output", args: []string{"/proc/version"}, code: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			var logged []string
			code := Command{ConfigDir: conf, TemplateUnit: "/x/soda-mcp@.socket", Stdout: &stdout, Stderr: &stderr,
				Log: func(f string, a ...any) { logged = append(logged, f) }}.Run(tt.args)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tt.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdoutHas) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tt.stdoutHas)
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.stderrHas)
			}
			if tt.code == 2 && !strings.Contains(stderr.String(), "soda-generator --help") {
				t.Errorf("usage error without a pointer to --help: %q", stderr.String())
			}
			if tt.generated {
				if _, err := os.Stat(filepath.Join(tt.args[0], "soda-mcp@jira.socket.d", "50-listen.conf")); err != nil {
					t.Errorf("drop-in not generated: %v", err)
				}
			}
		})
	}
}

// TestUserManager: systemd says which manager runs a generator in
// $SYSTEMD_SCOPE (251+); without it, the directory it was run from does.
func TestUserManager(t *testing.T) {
	for _, tt := range []struct {
		scope, argv0 string
		want         bool
	}{
		{"system", "/usr/lib/systemd/system-generators/soda-generator", false},
		{"user", "/usr/lib/systemd/user-generators/soda-generator", true},
		{"user", "/usr/lib/systemd/system-generators/soda-generator", true},
		{"system", "/usr/lib/systemd/user-generators/soda-generator", false},
		{"", "/usr/lib/systemd/user-generators/soda-generator", true},
		{"", "/etc/systemd/user-generators/soda-generator", true},
		{"", "/usr/lib/systemd/system-generators/soda-generator", false},
		{"", "soda-generator", false},
		{"", "./bin/soda-generator", false},
	} {
		if got := UserManager(tt.scope, tt.argv0); got != tt.want {
			t.Errorf("UserManager(%q, %q) = %v, want %v", tt.scope, tt.argv0, got, tt.want)
		}
	}
}

// TestCommandSandboxSlice: the command writes the slice drop-in for the
// CPU count it is given, and for a user's manager nothing else.
func TestCommandSandboxSlice(t *testing.T) {
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "jira.conf"), []byte("[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18101\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, user := range []bool{false, true} {
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		code := Command{ConfigDir: conf, TemplateUnit: "/x", NumCPU: 3, User: user, EtcDir: t.TempDir(), Stdout: &stdout, Stderr: &stderr,
			Log: func(string, ...any) {}}.Run([]string{out})
		if code != 0 {
			t.Fatalf("user=%v: exit %d: %s", user, code, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "soda-sandbox.slice.d", SandboxSliceDropInName))
		if err != nil || !strings.Contains(string(b), "CPUQuota=200%") {
			t.Errorf("user=%v: slice drop-in %q, %v; want CPUQuota=200%%", user, b, err)
		}
		if _, err := os.Stat(filepath.Join(out, "soda-mcp@jira.socket.d")); user == (err == nil) {
			t.Errorf("user=%v: soda-mcp@jira.socket.d: %v", user, err)
		}
	}
}
