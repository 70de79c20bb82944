package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckImageInit(t *testing.T) {
	// /bin/true is dynamically linked on the distributions soda targets.
	interp, err := elfInterp("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if interp == "" {
		t.Skip("host lacks: a dynamically linked /bin/true to check against")
	}
	if err := checkImageInit("/bin/true"); err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), interp) {
		t.Errorf("checkImageInit(/bin/true): %v, want it refused naming %s", err, interp)
	}
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkImageInit(script); err != nil {
		t.Errorf("a file that is not ELF: %v (exec judges it)", err)
	}
	if err := checkImageInit(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing init: no error")
	}
}
