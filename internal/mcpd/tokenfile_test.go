package mcpd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMainRefusesTokenFile checks that soda-mcpd fails at once, with a
// message that says what to do, when its token file is not a safe regular
// file; a FIFO used to block start-up in open(2), deaf to SIGTERM.
func TestMainRefusesTokenFile(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want []string
	}{
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o640); err != nil {
				t.Skipf("cannot create a FIFO here: %v", err)
			}
		}, []string{"FIFO", "not a regular file", "TokenFile="}},
		{"world-readable", func(t *testing.T, path string) {
			writeFile(t, path, strings.Repeat("ab", 32)+"\n")
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{"readable by every user", "chmod 0640 PATH"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "adhoc.token")
			tt.make(t, path)
			var stdout, stderr syncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			exit := make(chan int, 1)
			go func() {
				exit <- Main(ctx, []string{"--listen", "127.0.0.1:0", "--token-file", path, "--", echoBin}, &stdout, &stderr)
			}()
			select {
			case code := <-exit:
				if code != 1 {
					t.Errorf("Main = %d, want 1", code)
				}
				for _, w := range tt.want {
					w = strings.ReplaceAll(w, "PATH", path)
					if !strings.Contains(stderr.String(), w) {
						t.Errorf("stderr does not contain %q:\n%s", w, stderr.String())
					}
				}
				if strings.Contains(stderr.String(), "writable path") {
					t.Errorf("stderr gives the unrelated hint about a writable path:\n%s", stderr.String())
				}
			case <-time.After(5 * time.Second):
				cancel()
				if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("Main still running 5s after start with a %s token file; stderr:\n%s", tt.name, stderr.String())
			}
		})
	}
}
