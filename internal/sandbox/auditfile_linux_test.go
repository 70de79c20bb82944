package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpenAuditFile(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	secret := filepath.Join(dir, "root-script")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.WriteFile(secret, []byte("#!/bin/sh\n"), 0o700))
	must(t, os.Symlink(secret, filepath.Join(dir, "planted.jsonl")))
	must(t, os.Symlink(dir, filepath.Join(dir, "dirlink")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "linked"), nil, 0o600))
	must(t, os.Link(filepath.Join(dir, "linked"), filepath.Join(ws, "alias")))
	grants := []string{ws}
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{"new file", filepath.Join(dir, "audit.jsonl"), ""},
		{"again, appended", filepath.Join(dir, "audit.jsonl"), ""},
		{"inside a grant", filepath.Join(ws, "audit.jsonl"), "inside the granted directory"},
		{"the grant itself", ws, "inside the granted directory"},
		{"planted symlink", filepath.Join(dir, "planted.jsonl"), "symbolic link"},
		{"symlinked directory", filepath.Join(dir, "dirlink", "audit.jsonl"), "symbolic link"},
		{"into a grant through a link", filepath.Join(dir, "dirlink", "ws", "audit.jsonl"), "inside the granted directory"},
		{"fifo", filepath.Join(dir, "fifo"), "not a regular file"},
		{"hard link", filepath.Join(dir, "linked"), "2 hard links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var f *os.File
			var err error
			go func() { f, err = OpenAuditFile(tc.path, grants); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("OpenAuditFile(%s) blocked", tc.path)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				fi, _ := f.Stat()
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("mode %v, want 0600", fi.Mode().Perm())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("OpenAuditFile(%s) = %v, want an error containing %q", tc.path, err, tc.wantErr)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "#!/bin/sh\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other")
		must(t, os.WriteFile(other, nil, 0o600))
		must(t, os.Chown(other, 4242, 4242))
		if _, err := OpenAuditFile(other, nil); err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
			t.Errorf("a file of another uid: %v", err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
