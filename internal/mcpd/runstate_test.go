package mcpd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/runstate"
)

// TestForegroundPublishesRuntimeRecord: a soda-mcpd started by hand (no
// systemd, no NAME.conf, as "make run" does) publishes where it listens
// and its token file in its runtime record, so that sodactl can grant it;
// the record goes when it stops.
func TestForegroundPublishesRuntimeRecord(t *testing.T) {
	t.Setenv("RUNTIME_DIRECTORY", "")
	dir := runstate.SystemDir
	if os.Geteuid() != 0 {
		base := t.TempDir()
		t.Setenv("XDG_RUNTIME_DIR", base)
		dir = filepath.Join(base, "soda", "mcp")
	}
	name := fmt.Sprintf("soda-test-record-%d", os.Getpid())
	recPath := filepath.Join(dir, runstate.FileName(name))
	t.Cleanup(func() { os.Remove(recPath) })
	tokFile := filepath.Join(t.TempDir(), name+".token")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"--name", name, "--listen", "127.0.0.1:0", "--token-file", tokFile, "--", echoBin}, &stdout, &stderr)
	}()
	var rec runstate.Record
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, path, err := runstate.Lookup(name, []string{dir})
		if err == nil {
			rec = r
			if path != recPath {
				t.Errorf("record at %s, want %s", path, recPath)
			}
			break
		}
		select {
		case code := <-exit:
			t.Fatalf("soda-mcpd exited %d; stderr:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live runtime record within 10s: %v; stderr:\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec.PID != os.Getpid() || rec.Name != name || !rec.Auth || rec.TokenFile != tokFile || rec.Config != "" || rec.SocketActivated {
		t.Errorf("record = %+v", rec)
	}
	if len(rec.Listen) != 1 || !strings.HasPrefix(rec.Listen[0], "127.0.0.1:") || rec.Listen[0] == "127.0.0.1:0" {
		t.Errorf("record listens on %q, want the bound 127.0.0.1:PORT", rec.Listen)
	}
	if !strings.Contains(stderr.String(), "127.0.0.1:"+strings.TrimPrefix(rec.Listen[0], "127.0.0.1:")+"/mcp") {
		t.Errorf("record address %s is not the one logged:\n%s", rec.Listen[0], stderr.String())
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("soda-mcpd did not stop")
	}
	if _, err := os.Stat(recPath); !os.IsNotExist(err) {
		t.Errorf("record left behind after a clean stop: %v", err)
	}
}
