package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindInit: soda-sandbox-init next to the program first, then the
// installed one; one that exists but may not serve is an error naming it,
// and none at all says what to install.
func TestFindInit(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "sodactl")
	next := filepath.Join(dir, "bin", "soda-sandbox-init")
	installed := filepath.Join(dir, "libexec", "soda-sandbox-init")
	for _, d := range []string{filepath.Dir(exe), filepath.Dir(installed)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := findInit(exe, installed); err == nil || !strings.Contains(err.Error(), "install the soda package") || !strings.Contains(err.Error(), next) {
		t.Errorf("nothing installed: %v, want an error naming %s and what to install", err, next)
	}
	write(installed, 0o755)
	if p, err := findInit(exe, installed); err != nil || p != installed {
		t.Errorf("installed only: %q %v, want %s", p, err, installed)
	}
	write(next, 0o755)
	if p, err := findInit(exe, installed); err != nil || p != next {
		t.Errorf("next to the program: %q %v, want %s", p, err, next)
	}
	write(next, 0o757)
	if _, err := findInit(exe, installed); err == nil || !strings.Contains(err.Error(), "writable by everyone") {
		t.Errorf("world-writable init next to the program: %v, want a refusal", err)
	}
}

// TestNewNeedsInitPath: New refuses an engine without a usable init
// binary, naming Config.InitPath.
func TestNewNeedsInitPath(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "soda-sandbox-init")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, want string
	}{
		{"", "Config.InitPath is empty"},
		{"soda-sandbox-init", "not an absolute path"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
		{notExec, "not executable"},
	} {
		cfg := Detect()
		cfg.InitPath = tt.path
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), "Config.InitPath") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("InitPath %q: %v, want an error naming Config.InitPath and %q", tt.path, err, tt.want)
		}
	}
}
