package sandbox

import "testing"

// TestUIDPoolStartRotates: a long-lived process must not probe the same
// first slot for every sandbox (the old start was os.Getpid() % N, fixed
// for a daemon's life), so two consecutive leases, even with the first
// released in between, get different uids.
func TestUIDPoolStartRotates(t *testing.T) {
	p := &uidPool{dir: t.TempDir()}
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
