package runstate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deadPID returns the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestLookup(t *testing.T) {
	self := os.Getpid()
	start, err := ProcStart(self)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("host lacks: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	live := Record{PID: self, Start: start, Name: "everything", Listen: []string{"127.0.0.1:18100"}, Auth: true, TokenFile: "/var/lib/soda/mcp/everything.token"}
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // writes dir/everything.status.json
		ok      bool
		errHas  string
		wantPID int
	}{
		{name: "live", ok: true, wantPID: self, setup: func(t *testing.T, dir string) { write(t, dir, live, 0o644) }},
		{name: "live without start time", ok: true, wantPID: self, setup: func(t *testing.T, dir string) {
			r := live
			r.Start = 0
			write(t, dir, r, 0o644)
		}},
		{name: "absent", errHas: "no live everything.status.json", setup: func(*testing.T, string) {}},
		{name: "process gone", errHas: "stale: process", setup: func(t *testing.T, dir string) {
			r := live
			r.PID = deadPID(t)
			write(t, dir, r, 0o644)
		}},
		{name: "pid reused", errHas: "stale: process", setup: func(t *testing.T, dir string) {
			r := live
			r.Start = start + 1
			write(t, dir, r, 0o644)
		}},
		{name: "writable by others", errHas: "writable by others", setup: func(t *testing.T, dir string) { write(t, dir, live, 0o666) }},
		{name: "symlink", errHas: "not a regular file", setup: func(t *testing.T, dir string) {
			write(t, t.TempDir(), live, 0o644)
			if err := os.Symlink("/etc/hostname", filepath.Join(dir, FileName("everything"))); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "garbage", errHas: "invalid character", setup: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, FileName("everything")), []byte("{nope"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			r, path, err := Lookup("everything", []string{dir})
			if tt.ok {
				if err != nil {
					t.Fatalf("Lookup: %v", err)
				}
				if r.PID != tt.wantPID || path != filepath.Join(dir, "everything.status.json") || r.Listen[0] != "127.0.0.1:18100" || r.TokenFile != live.TokenFile {
					t.Errorf("Lookup = %+v, %s", r, path)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("Lookup error %v, want ErrNotRunning with %q", err, tt.errHas)
			}
		})
	}
}

// TestLookupSearchesInOrder: a stale record in the first directory does
// not hide a live one in the next.
func TestLookupSearchesInOrder(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write(t, a, Record{PID: deadPID(t), Name: "x"}, 0o644)
	write(t, b, Record{PID: os.Getpid(), Name: "x"}, 0o644)
	r, path, err := Lookup("x", []string{a, b})
	if err != nil || r.PID != os.Getpid() || filepath.Dir(path) != b {
		t.Fatalf("Lookup = %+v, %s, %v", r, path, err)
	}
}

func TestWriteDir(t *testing.T) {
	t.Setenv("RUNTIME_DIRECTORY", "/run/soda/mcp:/run/other")
	if d, err := WriteDir(); err != nil || d != "/run/soda/mcp" {
		t.Errorf("under systemd: %q, %v", d, err)
	}
	if os.Geteuid() == 0 {
		return // root writes to SystemDir
	}
	t.Setenv("RUNTIME_DIRECTORY", "")
	base := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", base)
	if d, err := WriteDir(); err != nil || d != filepath.Join(base, "soda", "mcp") {
		t.Errorf("as a user: %q, %v", d, err)
	}
}

func write(t *testing.T, dir string, r Record, mode os.FileMode) {
	t.Helper()
	if r.Name == "" {
		r.Name = "everything"
	}
	p := filepath.Join(dir, FileName(r.Name))
	if err := Write(p, r); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
