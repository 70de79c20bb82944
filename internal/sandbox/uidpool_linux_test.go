package sandbox

import (
	"strings"
	"testing"
)

// TestUIDPoolStartRotates: a long-lived process must not probe the same
// first slot for every sandbox (the old start was os.Getpid() % N, fixed
// for a daemon's life), so two consecutive leases, even with the first
// released in between, get different uids.
func TestUIDPoolStartRotates(t *testing.T) {
	p := &uidPool{base: UIDBase, count: UIDCount, dir: t.TempDir()}
	a, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	first := a.uid
	a.release()
	b, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if b.uid == first {
		t.Fatalf("two consecutive leases both probed uid %d first", first)
	}
	if b.uid < UIDBase || b.uid >= UIDBase+UIDCount || first < UIDBase || first >= UIDBase+UIDCount {
		t.Fatalf("uids %d, %d outside the range", first, b.uid)
	}
	// Held leases are never shared.
	c, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	if c.uid == b.uid {
		t.Fatalf("uid %d leased twice", c.uid)
	}
}

// TestUIDPoolRange: a configured range is the only one leased from, and a
// full range is an error that names it.
func TestUIDPoolRange(t *testing.T) {
	p := &uidPool{base: 3000000, count: 2, dir: t.TempDir()}
	a, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	b, err := p.lease()
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	for _, u := range []int{a.uid, b.uid} {
		if u != 3000000 && u != 3000001 {
			t.Fatalf("leased uid %d outside 3000000+2", u)
		}
	}
	if _, err := p.lease(); err == nil || !strings.Contains(err.Error(), "all 2 sandbox uids from 3000000 are in use") {
		t.Fatalf("third lease of a range of 2: %v", err)
	}
}
