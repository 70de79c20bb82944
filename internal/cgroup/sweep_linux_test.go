package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writableHierarchies are a v1 hierarchy root (pids) and our own cgroup
// v2 directory, where this test may make directories (root, hybrid host),
// or it skips.
func writableHierarchies(t *testing.T) (v1, v2 string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("host lacks: the cgroup hierarchies are writable by root only")
	}
	v1 = "/sys/fs/cgroup/pids"
	if err := os.Mkdir(filepath.Join(v1, "soda-gsweep-probe"), 0o755); err != nil {
		t.Skipf("host lacks: no writable cgroup v1 pids hierarchy here: %v", err)
	}
	os.Remove(filepath.Join(v1, "soda-gsweep-probe"))
	ms, err := readMounts()
	if err != nil {
		t.Skipf("host lacks: %v", err)
	}
	m, err := ms.cgroup2()
	if err != nil {
		t.Skipf("host lacks: %v", err)
	}
	own, err := ownCgroup2Path()
	if err != nil {
		t.Skipf("host lacks: %v", err)
	}
	v2 = filepath.Join(m, own)
	if err := os.Mkdir(filepath.Join(v2, "soda-gsweep-probe"), 0o755); err != nil {
		t.Skipf("host lacks: our cgroup v2 directory %s is not writable: %v", v2, err)
	}
	os.Remove(filepath.Join(v2, "soda-gsweep-probe"))
	return v1, v2
}

// TestSweepGroups: a group whose owner lock is free goes from every
// hierarchy, at any depth, however young, its processes killed first; a
// live owner's (lock held, by this very process) stays however old and
// empty; without a lock file only the empty directories older than the
// minimum age go; a systemd unit of the prefix and another prefix stay;
// a lock file without directories goes.
func TestSweepGroups(t *testing.T) {
	v1, v2 := writableHierarchies(t)
	lockDir := t.TempDir()
	mk := func(path string, age time.Duration) string {
		t.Helper()
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = removeCgroupDir(path) })
		if age > 0 {
			old := time.Now().Add(-age)
			_ = os.Chtimes(path, old, old)
		}
		return path
	}
	lockFile := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(lockDir, name+".lock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The dead owner's group: in v2, and in v1 below an intermediate
	// cgroup (as the memory hierarchy's below its owner's own), with a
	// process left in it.
	nest := mk(filepath.Join(v1, "soda-gsweepnest"), 0)
	deadV2 := mk(filepath.Join(v2, "soda-gsweep-dead"), 0)
	deadV1 := mk(filepath.Join(nest, "soda-gsweep-dead"), 0)
	lockFile("soda-gsweep-dead")
	sleeper := exec.Command("sleep", "987.125")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	for _, d := range []string{deadV2, deadV1} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the sleeper into %s: %v", d, err)
		}
	}
	// A live owner's: this process holds its lock.
	live := mk(filepath.Join(v2, "soda-gsweep-live"), time.Hour)
	liveV1 := mk(filepath.Join(v1, "soda-gsweep-live"), time.Hour)
	l, err := LockGroup(t.Context(), lockDir, "soda-gsweep-live")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	// No lock file: by emptiness and age.
	legacyOld := mk(filepath.Join(v1, "soda-gsweep-legacyold"), time.Hour)
	legacyNew := mk(filepath.Join(v1, "soda-gsweep-legacynew"), 0)
	unit := mk(filepath.Join(v2, "soda-gsweep-x.scope"), time.Hour)
	other := mk(filepath.Join(v2, "soda-gsweepother-dead"), time.Hour)
	lockFile("soda-gsweep-lockonly")

	removed, err := SweepGroups(t.Context(), testLogger(t), "soda-gsweep", lockDir, 10*time.Second)
	if err != nil {
		t.Fatalf("SweepGroups: %v", err)
	}
	slices.Sort(removed)
	want := []string{deadV1, deadV2, legacyOld}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, gone := range want {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
	for _, kept := range []string{live, liveV1, legacyNew, unit, other, nest} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the process left in the dead owner's group is alive")
	}
	locks, _ := os.ReadDir(lockDir)
	var names []string
	for _, e := range locks {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "soda-gsweep-live.lock" {
		t.Errorf("lock files left: %v, want the live owner's only", names)
	}
}
