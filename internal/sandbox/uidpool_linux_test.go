package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
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

// TestIDMapNSOutlivesItsProcess: the process an idmap namespace is made
// with is gone once newIDMapNS returns (it would only compete with the
// sandbox for the CPUs), and the descriptor alone keeps the namespace
// usable: a tree idmapped with it shows the owner's files as the sandbox
// uid's.
func TestIDMapNSOutlivesItsProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("host lacks: root (idmapped mounts are made by root; CI runs these tests as root)")
	}
	const owner, sandboxUID = 4242, UIDBase + 7
	ns, err := newIDMapNS(testInitPath, sandboxUID, sandboxUID, owner, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.close()

	// Our children only: other tests' sandboxes (other packages run at
	// the same time) make namespaces too.
	for _, pid := range procsRunning(wire.HoldArg0) {
		status, _ := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
			t.Errorf("pid %s: a namespace holder still runs after newIDMapNS returned", pid)
		}
	}

	dir := t.TempDir()
	f := filepath.Join(dir, "owned")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, owner, owner); err != nil {
		t.Fatal(err)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.fd.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			// The control: the filesystem under TempDir cannot idmap.
			t.Skipf("host lacks: idmapped mounts on the filesystem of %s (%v)", dir, err)
		}
		t.Fatalf("idmap with the namespace after its process ended: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tree, "owned", &st, 0); err != nil {
		t.Fatal(err)
	}
	if st.Uid != sandboxUID || st.Gid != sandboxUID {
		t.Fatalf("through the idmapped tree the owner's file is %d:%d, want the sandbox uid %d", st.Uid, st.Gid, sandboxUID)
	}
}
