package token

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadNotRegular checks that Read refuses, at once, a token path that is
// not a regular file: a FIFO (whose open(2) would block start-up until a
// writer appears), a directory, a device, a symbolic link.
func TestReadNotRegular(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want []string // in the error message
	}{
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o640); err != nil {
				t.Skipf("cannot create a FIFO here: %v", err)
			}
		}, []string{"FIFO", "regular file"}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o750); err != nil {
				t.Fatal(err)
			}
		}, []string{"directory", "regular file"}},
		{"device", func(t *testing.T, path string) {
			if err := mknodDevNull(path); err != nil {
				t.Skipf("cannot create a device node here (needs CAP_MKNOD): %v", err)
			}
		}, []string{"device", "regular file"}},
		{"symlink to a good file", func(t *testing.T, path string) {
			target := path + ".real"
			if err := os.WriteFile(target, []byte(good+"\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, []string{"symbolic link", "TokenFile="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.token")
			tt.make(t, path)
			done := make(chan error, 1)
			go func() {
				_, err := Read(path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("Read(%s) succeeded, want a refusal", tt.name)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name %s", err, path)
				}
			case <-time.After(2 * time.Second):
				// Release the blocked open(2) so that the test can end.
				if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("Read(%s) blocked for 2s", tt.name)
			}
		})
	}
}

// TestEnsureFIFO is the start-up case of issue 8: soda-mcpd must fail at
// once, not hang in open(2), when TokenFile= names a FIFO.
func TestEnsureFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.token")
	if err := syscall.Mkfifo(path, 0o640); err != nil {
		t.Skipf("cannot create a FIFO here: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Ensure(path)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Fatalf("Ensure on a FIFO = %v, want a refusal naming a regular file", err)
		}
	case <-time.After(2 * time.Second):
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("Ensure on a FIFO blocked for 2s")
	}
}

// TestPermissions checks which modes of the token file and its directory are
// refused: what lets users other than owner and group read or replace the
// token.
func TestPermissions(t *testing.T) {
	tests := []struct {
		name    string
		file    os.FileMode // 0: no file yet (Ensure creates it)
		dir     os.FileMode
		refused bool
		want    []string
	}{
		{name: "0640 in 0750", file: 0o640, dir: 0o750},
		{name: "0600 in 0700", file: 0o600, dir: 0o700},
		{name: "group-writable file", file: 0o660, dir: 0o750},
		{name: "world-searchable directory", file: 0o640, dir: 0o755},
		{name: "world-readable file", file: 0o644, dir: 0o750, refused: true, want: []string{"readable by every user", "chmod 0640", "delete"}},
		{name: "world-writable file", file: 0o646, dir: 0o750, refused: true, want: []string{"writable by every user", "chmod 0640"}},
		{name: "world-writable directory", file: 0o640, dir: 0o757, refused: true, want: []string{"directory", "writable by every user", "chmod o-w"}},
		{name: "sticky world-writable directory", file: 0o640, dir: 0o1777, refused: true, want: []string{"directory", "writable by every user"}},
		{name: "no file, world-writable directory", dir: 0o777, refused: true, want: []string{"directory", "writable by every user"}},
		{name: "no file, good directory", dir: 0o750},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "x.token")
			if tt.file != 0 {
				if err := os.WriteFile(path, []byte(good+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.file); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tt.dir); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
			_, ensureErr := Ensure(path)
			errs := []error{ensureErr}
			if tt.file != 0 {
				_, readErr := Read(path)
				errs = append(errs, readErr)
			}
			for i, err := range errs {
				fn := [...]string{"Ensure", "Read"}[i]
				if !tt.refused {
					if err != nil {
						t.Fatalf("%s: %v, want success", fn, err)
					}
					continue
				}
				if err == nil {
					t.Fatalf("%s succeeded, want a refusal", fn)
				}
				if !errors.Is(err, ErrInsecure) {
					t.Errorf("%s: error %q does not wrap ErrInsecure", fn, err)
				}
				for _, w := range append(tt.want, path) {
					if w == path && strings.Contains(tt.name, "directory") {
						w = dir
					}
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not mention %q", fn, err, w)
					}
				}
			}
			if tt.refused && tt.file == 0 {
				if _, err := os.Lstat(path); err == nil {
					t.Errorf("Ensure created %s in a refused directory", path)
				}
			}
		})
	}
}
