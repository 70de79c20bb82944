package cgroup

import (
	"os"
	"testing"
)

// TestWarmerMovesNothing: the warm-up migration leaves this
// process in the cgroups it was in, in every hierarchy.
func TestWarmerMovesNothing(t *testing.T) {
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	w := NewWarmer()
	if w == nil {
		t.Skip("host lacks: a cgroup v1 hierarchy this process can write (root on a v1 or hybrid host): nothing to warm")
	}
	w.migrate()
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("the warm-up moved this process:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
