package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSweep: of the leftover cgroups of a prefix in the v2 tree that no
// owner lock marks, only the empty ones older than the minimum age go; a populated one (a live sibling), a fresh
// one (a sibling about to clone into it) and another prefix's stay.
func TestSweep(t *testing.T) {
	p, err := newCgroupPlacer("soda-sweeptest", Limits{}, Parent{})
	if err != nil {
		t.Skipf("no writable cgroup v2 subtree here: %v", err)
	}
	dir := filepath.Join(p.mount, p.base)
	mk := func(name string, age time.Duration) string {
		path := filepath.Join(dir, name)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
		old := time.Now().Add(-age)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		return path
	}
	stale := mk("soda-sweeptest-dead", time.Hour)
	fresh := mk("soda-sweeptest-new", 0)
	other := mk("soda-othertest-dead", time.Hour)
	busy := mk("soda-sweeptest-busy", time.Hour)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Moving the process in touched the directory: backdate it again.
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(busy, old, old)

	removed, err := SweepGroups(t.Context(), testLogger(t), "soda-sweeptest", "", 10*time.Second)
	if err != nil {
		t.Fatalf("SweepGroups: %v", err)
	}
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want only %s", removed, stale)
	}
	for _, keep := range []string{fresh, other, busy} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	// Move the sleeper out so that its cgroup can be cleaned up.
	_ = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644)
}
