package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImageInit(t *testing.T) {
	// /bin/true is dynamically linked on the distributions soda targets.
	interp, err := elfInterp("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if interp == "" {
		t.Skip("host lacks: a dynamically linked /bin/true to check against")
	}
	if err := imageInitError("/bin/true", interp); err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), interp) {
		t.Errorf("imageInitError(/bin/true): %v, want it refused naming %s", err, interp)
	}
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := elfInterp(script); err != nil || got != "" {
		t.Errorf("a file that is not ELF: %q, %v (exec judges it)", got, err)
	}
	if _, err := elfInterp(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing init: no error")
	}
}
