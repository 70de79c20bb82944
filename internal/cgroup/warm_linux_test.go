package cgroup

import (
	"os"
	"testing"
)

// TestWarmMigrationsMovesNothing: the warm-up migration leaves this
// process in the cgroups it was in, in every hierarchy.
func TestWarmMigrationsMovesNothing(t *testing.T) {
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	warmMigrations()
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("the warm-up moved this process:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
