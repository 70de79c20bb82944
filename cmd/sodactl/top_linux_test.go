//go:build !soda_lean

package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sodadclient"
)

// TestTopQuits: on a terminal, sodactl top redraws in place and quits on
// q, and on Ctrl-C (a byte in raw mode), with the terminal's settings put
// back.
func TestTopQuits(t *testing.T) {
	bin := t.TempDir()
	sodactl := filepath.Join(bin, "sodactl")
	if out, err := exec.Command("go", "build", "-o", sodactl, "github.com/soda-project/soda/cmd/sodactl").CombinedOutput(); err != nil {
		t.Fatalf("build sodactl: %v\n%s", err, out)
	}
	for _, key := range []string{"q", "\x03"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			master, slave, err := sodadclient.OpenPTY()
			if err != nil {
				t.Skipf("SKIP: no pty here: %v", err)
			}
			defer master.Close()
			before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sodactl, "top", "--interval", "200ms", "--runtime-dir", t.TempDir(), "--textfile-dir", t.TempDir())
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var screen bytes.Buffer
			got := make(chan struct{})
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := master.Read(buf)
					screen.Write(buf[:n])
					if strings.Count(screen.String(), "soda top") >= 2 {
						close(got)
						return
					}
					if err != nil {
						return
					}
				}
			}()
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("no two screens within 5 s:\n%q", screen.String())
			}
			if !strings.Contains(screen.String(), "\x1b[H\x1b[2J") {
				t.Errorf("the screen is not redrawn in place:\n%q", screen.String())
			}
			if _, err := master.Write([]byte(key)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("sodactl top after %q: %v", key, err)
				}
			case <-time.After(3 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("sodactl top did not quit on %q", key)
			}
			after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
				t.Errorf("terminal settings not restored: lflag %#x -> %#x", before.Lflag, after.Lflag)
			}
			slave.Close()
		})
	}
}
