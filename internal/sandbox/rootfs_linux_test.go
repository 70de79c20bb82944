package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootFS: with Spec.RootFS the sandbox's system is that directory
// (an unpacked image), read-only: the image's program runs, the host's
// /usr is not there, nothing of the image can be written, and the image
// is unchanged after the run; the sandbox's own places (home, /tmp,
// /proc) are there as always.
func TestRootFS(t *testing.T) {
	requireNamespaces(t)
	root := filepath.Join(t.TempDir(), "image")
	for _, d := range []string{"bin", "etc", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "probe"), "github.com/soda-project/soda/test/images/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("ID=soda-test-image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil { // the sandbox's user reads it
		t.Fatal(err)
	}
	st, out, errOut, err := runSandbox(t, func(s *Spec) { s.RootFS = root }, "/bin/probe")
	if err != nil || st.Code != 0 {
		t.Fatalf("sandbox on %s: %v %+v\nstdout: %s\nstderr: %s", root, err, st, out, errOut)
	}
	for _, want := range []string{`os-release: "ID=soda-test-image\n" <nil>`, "stat /usr/bin/env: false", "stat /bin/sh: false",
		"write /bin/written: false", "write home: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "bin"))
	if len(entries) != 1 {
		t.Errorf("the image changed: bin holds %d entries", len(entries))
	}
	// Control: without RootFS the same command finds no /bin/probe.
	if st, _, _, err := runSandbox(t, nil, "/bin/probe"); err == nil && st.Code == 0 {
		t.Error("control: /bin/probe ran without the image")
	}
	for _, bad := range []string{"relative", "/", filepath.Join(t.TempDir(), "missing")} {
		if _, _, _, err := runSandbox(t, func(s *Spec) { s.RootFS = bad }, "/bin/probe"); err == nil || !strings.Contains(err.Error(), "sandbox root") {
			t.Errorf("RootFS %q: %v, want a refusal naming the sandbox root", bad, err)
		}
	}
}
