package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// TestParentCheck: a parent is one path element that a sweep of the
// placer's prefix can never take for a leftover group.
func TestParentCheck(t *testing.T) {
	for _, tt := range []struct {
		name    string
		parent  string
		wantErr string
	}{
		{"none", "", ""},
		{"systemd's name", "soda-sandbox.slice", ""},
		{"another name", "sandboxes", ""},
		{"matches the sweep", "soda-sandbox-all", "sweep"},
		{"is the prefix's group", "soda-sandbox-", "sweep"},
		{"two elements", "a/b", "one path element"},
		{"dot", ".", "one path element"},
		{"dot dot", "..", "one path element"},
		{"newline", "a\nb", "one path element"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Parent{Name: tt.parent, CPUQuota: 100}.check("soda-sandbox")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Parent %q: %v, want no error", tt.parent, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Parent %q: %v, want an error saying %q", tt.parent, err, tt.wantErr)
			}
		})
	}
}

// TestParentCPUWrites: the collective quota is written only over the
// kernel's default (no quota); any other value is an operator's, or an
// earlier soda's, and stays.
func TestParentCPUWrites(t *testing.T) {
	for _, tt := range []struct {
		cur   string
		pct   uint64
		write string // "": none
	}{
		{"max 100000\n", 100, "100000 100000"},
		{"max 100000\n", 700, "700000 100000"},
		{"max 50000\n", 150, "150000 100000"},
		{"100000 100000\n", 100, ""},
		{"100000 100000\n", 300, ""},
		{"50000 100000\n", 100, ""},
		{"200000 1000000\n", 100, ""},
	} {
		w, ok, err := v2ParentCPUMax(tt.cur, tt.pct)
		if err != nil || ok != (tt.write != "") || w != tt.write {
			t.Errorf("v2ParentCPUMax(%q, %d) = %q, %v, %v; want %q", tt.cur, tt.pct, w, ok, err, tt.write)
		}
	}
	for _, cur := range []string{"", "lots 100000", "1 2 3"} {
		if _, _, err := v2ParentCPUMax(cur, 100); err == nil {
			t.Errorf("v2ParentCPUMax(%q): no error", cur)
		}
	}
	for _, tt := range []struct {
		cur   string
		pct   uint64
		write int64 // 0: none
	}{
		{"-1\n", 100, 100000},
		{"-1\n", 300, 300000},
		{"100000\n", 100, 0},
		{"50000\n", 300, 0},
	} {
		w, ok, err := v1ParentQuota(tt.cur, tt.pct)
		if err != nil || ok != (tt.write != 0) || w != tt.write {
			t.Errorf("v1ParentQuota(%q, %d) = %d, %v, %v; want %d", tt.cur, tt.pct, w, ok, err, tt.write)
		}
	}
	if _, _, err := v1ParentQuota("many", 100); err == nil {
		t.Error("v1ParentQuota(many): no error")
	}
}

// TestClampQuota: on cgroup v1 the kernel refuses a child's quota above
// its nearest limited ancestor's (per period), so a group's is capped.
func TestClampQuota(t *testing.T) {
	for _, tt := range []struct {
		quota, ceilQuota, ceilPeriod, want int64
	}{
		{100000, -1, 100000, 100000},         // no ceiling
		{100000, 0, 0, 100000},               // none found
		{200000, 100000, 100000, 100000},     // --cpu 200 below a collective 100 %
		{50000, 100000, 100000, 50000},       // below it: kept
		{100000, 100000, 100000, 100000},     // equal: kept
		{300000, 150000, 1000000, 15000},     // another period: 15 %
		{300000, 333333, 1000000, 33333},     // rounded down, never above
		{100000, 500, 100000, 1000},          // never below the kernel's 1 ms
		{200000, 1000000000, 100000, 200000}, // far above: kept
	} {
		if got := clampQuota(tt.quota, tt.ceilQuota, tt.ceilPeriod); got != tt.want {
			t.Errorf("clampQuota(%d, %d, %d) = %d, want %d", tt.quota, tt.ceilQuota, tt.ceilPeriod, got, tt.want)
		}
	}
}

// removeParent removes a test's parent directory and what it holds.
func removeParent(t *testing.T, dirs ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, d := range dirs {
			if err := removeCgroupDir(d); err != nil {
				t.Errorf("remove the test's parent %s: %v", d, err)
			}
		}
	})
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatalf("write %s to %s: %v", s, path, err)
	}
}

// TestCgroup1Parent: with a parent, each group's v1 directories (and its
// v2 one) are made in the parent, which is made once, holds the collective
// quota, survives the group's Release and is never swept; a quota already
// there (an operator's) stays, and a group's own quota above it is capped
// to it instead of refused; a parent whose quota was reset to none gets
// the collective one again.
func TestCgroup1Parent(t *testing.T) {
	const prefix, name = "soda-c1ptest", "soda-c1ptest.slice"
	limits := Limits{MemoryMax: 256 << 20, TasksMax: 50, CPUQuota: 100, CPUWeight: 100}
	p, err := newCgroup1Placer(prefix, limits, Parent{Name: name, CPUQuota: 150})
	if err != nil {
		t.Skipf("host lacks: no writable cgroup v1 hierarchies here: %v", err)
	}
	var parents []string
	for c, mount := range p.mounts {
		parents = append(parents, filepath.Join(mount, p.base[c]))
	}
	if p.v2 != nil {
		parents = append(parents, filepath.Join(p.v2.mount, p.v2.base))
	}
	removeParent(t, parents...)
	if m := p.Unenforced(); len(m) > 0 {
		t.Skipf("host lacks: the cgroup v1 hierarchies here lack %v", m)
	}
	for _, d := range parents {
		if filepath.Base(d) != name {
			t.Fatalf("the placer's base %s is not its parent %s", d, name)
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("parent %s: %v", d, err)
		}
	}
	cpuParent := filepath.Join(p.mounts[cgroup1.Cpu], p.base[cgroup1.Cpu])
	if q, per := readTrim(t, filepath.Join(cpuParent, "cpu.cfs_quota_us")), readTrim(t, filepath.Join(cpuParent, "cpu.cfs_period_us")); q != "150000" || per != "100000" {
		t.Errorf("the parent's quota is %s over %s µs, want 150000 over 100000", q, per)
	}

	g, err := p.NewGroup(fmt.Sprintf("g%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	g1 := g.(*cgroup1Group)
	<-g1.made
	if g1.err != nil {
		t.Fatal(g1.err)
	}
	for _, d := range g1.dirs {
		if !slices.Contains(parents, filepath.Dir(d)) {
			t.Errorf("group directory %s is not in a parent %v", d, parents)
		}
	}
	if g1.v2 != nil && !slices.Contains(parents, filepath.Dir(g1.v2.path)) {
		t.Errorf("group v2 directory %s is not in the parent", g1.v2.path)
	}
	for c, path := range g1.V1Paths() {
		if want := "/" + name + "/" + g1.name; !strings.HasSuffix(path, want) {
			t.Errorf("V1Paths[%s] = %s, want it to end in %s", c, path, want)
		}
	}
	if q := readTrim(t, filepath.Join(cpuParent, g1.name, "cpu.cfs_quota_us")); q != "100000" {
		t.Errorf("the group's own quota is %s, want 100000", q)
	}

	// A leftover below the parent is swept; the parent never is.
	left := filepath.Join(p.mounts[cgroup1.Pids], p.base[cgroup1.Pids], prefix+"-leftover")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(left, old, old)
	removed, err := SweepGroups(t.Context(), testLogger(t), prefix, t.TempDir(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{left}) {
		t.Errorf("SweepGroups removed %v, want the leftover below the parent only, %s", removed, left)
	}

	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	for _, d := range parents {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("parent %s gone after the group's Release: %v", d, err)
		}
		if b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(strings.TrimSpace(string(b))) > 0 {
			t.Errorf("parent %s holds processes: %s", d, b)
		}
	}

	// An operator's quota stays; a group's above it is capped to it. (The
	// kernel refuses a parent's quota below a child's, and counts a
	// removed child for a little while: retry.)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := os.WriteFile(filepath.Join(cpuParent, "cpu.cfs_quota_us"), []byte("50000"), 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lower the parent's quota below its removed group's: %v", err)
		}
	}
	p2, err := newCgroup1Placer(prefix, limits, Parent{Name: name, CPUQuota: 150})
	if err != nil {
		t.Fatal(err)
	}
	if q := readTrim(t, filepath.Join(cpuParent, "cpu.cfs_quota_us")); q != "50000" {
		t.Errorf("the operator's quota 50000 was overwritten with %s", q)
	}
	g, err = p2.NewGroup(fmt.Sprintf("h%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	g2 := g.(*cgroup1Group)
	<-g2.made
	if g2.err != nil {
		t.Fatalf("a group's quota 100000 below a parent's 50000: %v", g2.err)
	}
	if q := readTrim(t, filepath.Join(cpuParent, g2.name, "cpu.cfs_quota_us")); q != "50000" {
		t.Errorf("the group's quota below a parent of 50000 is %s, want it capped to 50000", q)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}

	// Reset to none: the collective quota again.
	writeFile(t, filepath.Join(cpuParent, "cpu.cfs_quota_us"), "-1")
	if _, err := newCgroup1Placer(prefix, limits, Parent{Name: name, CPUQuota: 150}); err != nil {
		t.Fatal(err)
	}
	if q := readTrim(t, filepath.Join(cpuParent, "cpu.cfs_quota_us")); q != "150000" {
		t.Errorf("the parent's quota after a reset is %s, want 150000 again", q)
	}

	// The sweep's prefix cannot name the parent.
	if _, err := newCgroup1Placer(prefix, limits, Parent{Name: prefix + "-all"}); err == nil {
		t.Error("a parent the sweep would take for a group was accepted")
	}
}

// TestCgroup2Parent: with a parent, each group's v2 directory is made in
// it, the parent survives the group and is never swept; where our cgroup
// hands the cpu controller down, the parent holds the collective quota in
// cpu.max and hands memory, pids and cpu down to the groups.
func TestCgroup2Parent(t *testing.T) {
	const prefix, name = "soda-c2ptest", "soda-c2ptest.slice"
	p, err := newCgroupPlacer(prefix, Limits{CPUQuota: 100}, Parent{Name: name, CPUQuota: 150})
	if err != nil {
		t.Skipf("host lacks: no writable cgroup v2 tree here: %v", err)
	}
	parent := filepath.Join(p.mount, p.base)
	removeParent(t, parent)
	if filepath.Base(parent) != name {
		t.Fatalf("the placer's base %s is not its parent %s", parent, name)
	}
	own, err := os.ReadFile(filepath.Join(filepath.Dir(parent), "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.NewGroup(fmt.Sprintf("g%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	gdir := g.(*cgroupGroup).path
	if filepath.Dir(gdir) != parent {
		t.Errorf("group directory %s is not in the parent %s", gdir, parent)
	}
	left := filepath.Join(parent, prefix+"-leftover")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(left, old, old)
	removed, err := SweepGroups(t.Context(), testLogger(t), prefix, t.TempDir(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{left}) {
		t.Errorf("SweepGroups removed %v, want the leftover below the parent only, %s", removed, left)
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent); err != nil {
		t.Errorf("parent gone after the group's Release: %v", err)
	}
	if !slices.Contains(strings.Fields(string(own)), "cpu") {
		t.Skipf("host lacks: a cpu controller handed down (the rest of the test): our cgroup %s hands no cpu controller down (cgroup.subtree_control %q): no cpu.max to hold a quota", filepath.Dir(parent), strings.TrimSpace(string(own)))
	}
	if got := readTrim(t, filepath.Join(parent, "cpu.max")); got != "150000 100000" {
		t.Errorf("the parent's cpu.max is %q, want 150000 100000", got)
	}
	sub := strings.Fields(readTrim(t, filepath.Join(parent, "cgroup.subtree_control")))
	for _, c := range []string{"memory", "pids", "cpu"} {
		if slices.Contains(strings.Fields(string(own)), c) && !slices.Contains(sub, c) {
			t.Errorf("the parent does not hand %s down (cgroup.subtree_control %v)", c, sub)
		}
	}
	writeFile(t, filepath.Join(parent, "cpu.max"), "50000 100000")
	if _, err := newCgroupPlacer(prefix, Limits{CPUQuota: 100}, Parent{Name: name, CPUQuota: 150}); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(parent, "cpu.max")); got != "50000 100000" {
		t.Errorf("the operator's cpu.max 50000 100000 was overwritten with %q", got)
	}
}
