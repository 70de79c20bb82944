package validate

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCleanupFailurePoisons: a real clean-up failure through the real
// binary. The spare sandbox's home in the owner directory is made a mount
// point on the host (as a process or mount holding it busy would), so the
// clean-up after the call cannot remove it: the verdict says the clean-up
// failed, the worker refuses work and /ready is 503; after a restart
// (with the mount gone) it is still poisoned, until --reconcile.
func TestCleanupFailurePoisons(t *testing.T) {
	requireSandbox(t)
	state := t.TempDir()
	w := startHTTP(t, state, "shellcheck", shellcheckConf)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", w.stderr.String())
		}
	})
	tmp := filepath.Join(state, "shellcheck", "tmp")
	var home string
	for deadline := time.Now().Add(10 * time.Second); home == ""; {
		if dirs := homeDirs(tmp); len(dirs) == 1 {
			home = filepath.Join(tmp, dirs[0])
		} else if time.Now().After(deadline) {
			t.Fatalf("no spare sandbox's home in %s: %v", tmp, dirs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Mount("tmpfs", home, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs on the sandbox's home (%v): the failure cannot be made", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(home, syscall.MNT_DETACH) })
	ready := func(w *httpWorker) int {
		req, _ := http.NewRequest("GET", "http://"+w.addr+"/ready", nil)
		req.Header.Set("Authorization", "Bearer "+w.tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := ready(w); c != 200 {
		t.Fatalf("/ready before the call: %d", c)
	}
	cs := w.connect(t)
	defer cs.Close()
	v, text, isErr := validate(t, cs, [2]string{"a.sh", "#!/bin/bash\necho \"$1\"\n"})
	if !strings.HasPrefix(v.Cleanup, "failed: ") || !strings.Contains(v.Cleanup, filepath.Base(home)) {
		t.Fatalf("a call whose sandbox's home could not be removed: clean-up %q (isError %v)\n%s", v.Cleanup, isErr, text)
	}
	for deadline := time.Now().Add(3 * time.Second); ready(w) != 503; {
		if time.Now().After(deadline) {
			t.Fatal("/ready is not 503 after a failed clean-up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, text, isErr := validate(t, cs, [2]string{"a.sh", "true\n"}); !isErr || !strings.Contains(text, "poisoned") {
		t.Errorf("a call after the failed clean-up: %s", text)
	}
	// The operator finds the mount and removes it; a restart alone does
	// not clear the poisoning.
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	_ = w.cmd.Wait()
	if err := syscall.Unmount(home, 0); err != nil {
		t.Fatalf("unmount %s: %v", home, err)
	}
	w2 := startHTTP(t, state, "shellcheck", shellcheckConf)
	if c := ready(w2); c != 503 {
		t.Errorf("/ready after a restart of a poisoned worker: %d, want 503", c)
	}
	cs2 := w2.connect(t)
	defer cs2.Close()
	if _, text, isErr := validate(t, cs2, [2]string{"a.sh", "true\n"}); !isErr || !strings.Contains(text, "poisoned") || !strings.Contains(text, filepath.Base(home)) {
		t.Errorf("a call after a restart: %s", text)
	}
	cs2.Close()
	_ = w2.cmd.Process.Signal(syscall.SIGTERM)
	_ = w2.cmd.Wait()
	w3 := startHTTP(t, state, "shellcheck", shellcheckConf, "--reconcile")
	for deadline := time.Now().Add(3 * time.Second); ready(w3) != 200; {
		if time.Now().After(deadline) {
			t.Fatal("/ready is not 200 after --reconcile")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
