package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// cgroup1Controllers are the v1 hierarchies a cgroup1Placer may use, each
// with the limit it enforces.
var cgroup1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu}

// cgroup1Placer creates, for each child, one directory in each of the v1
// memory, pids and cpu hierarchies that its limits need (below the
// caller's own v1 cgroups) and,
// when the host has a writable cgroup v2 tree, one v2 directory too: the
// child is cloned into the v2 one (CLONE_INTO_CGROUP) and killed as a whole
// through its cgroup.kill; the v1 ones hold the limits. For hybrid hosts
// (cgroup v1 controllers, a v2 tree without them) with no systemd.
type cgroup1Placer struct {
	mounts map[cgroup1.Name]string // hierarchy → its directory (/sys/fs/cgroup/memory)
	own    map[cgroup1.Name]string // hierarchy → our cgroup, as /proc/self/cgroup says
	base   map[cgroup1.Name]string // hierarchy → our cgroup below its mount
	prefix string
	limits Limits
	memsw  bool          // memory.memsw.* exists: swap is limited too
	v2     *cgroupPlacer // nil: no writable v2 tree; kill by signalling cgroup.procs
	// ceilQuota over ceilPeriod is the CPU quota of the nearest cgroup
	// with one at or above where groups are made (the parent's); the
	// kernel refuses a group's above it (-1: none).
	ceilQuota, ceilPeriod int64
}

// NewCgroup1Placer returns a placer that puts each child in its own
// directories of the cgroup v1 memory, pids and cpu hierarchies (those
// its limits need), below the caller's own v1 cgroups, with MemoryMax as
// memory.limit_in_bytes (and memory.memsw.limit_in_bytes: no swap beyond
// it), TasksMax as pids.max,
// CPUQuota as cpu.cfs_quota_us over cpu.cfs_period_us and CPUWeight as
// cpu.shares. The child is placed once it has a pid (Started), by writing
// it to each hierarchy's cgroup.procs: the caller must make sure it runs
// nothing before (soda's sandbox init waits for its placed byte). When
// the host also has a writable cgroup v2 tree (a hybrid host), the child
// is cloned into a v2 directory as well, so that it can be killed as a
// whole (cgroup.kill); without one, Kill signals every process the v1
// hierarchies list until none is left. It needs write access to the v1
// hierarchies (root, in practice) and returns an error saying why it
// cannot be used otherwise.
//
// With a parent, the directories are made in it (in each hierarchy used,
// and in the v2 tree): see Parent.
func NewCgroup1Placer(prefix string, limits Limits, parent Parent) (Placer, error) {
	return newCgroup1Placer(prefix, limits, parent)
}

func newCgroup1Placer(prefix string, limits Limits, parent Parent) (*cgroup1Placer, error) {
	if err := parent.check(prefix); err != nil {
		return nil, err
	}
	own, _, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	p := &cgroup1Placer{mounts: map[cgroup1.Name]string{}, own: map[cgroup1.Name]string{}, base: map[cgroup1.Name]string{},
		prefix: prefix, limits: limits}
	ms, err := readMounts()
	if err != nil {
		return nil, err
	}
	if p.v2, err = killOnlyV2(ms, prefix, parent); err != nil {
		return nil, err
	}
	mounts := ms.v1()
	for _, c := range p.wanted() {
		m, ok := mounts[string(c)]
		if _, in := own[string(c)]; !ok || !in {
			continue // not a v1 hierarchy here
		}
		// Our cgroup below the mount's root (a container sees its own).
		base, err := filepath.Rel(m.root, own[string(c)])
		if err != nil || strings.HasPrefix(base, "..") {
			return nil, fmt.Errorf("cgroup v1 %s: our cgroup %s is outside the mounted %s", c, own[string(c)], m.root)
		}
		base = filepath.Join("/", base)
		// cgroup1's subsystems find the hierarchy at /sys/fs/cgroup/NAME
		// (a symbolic link where controllers share a mount).
		mount := filepath.Join(cgroup1Root, string(c))
		if real, err := filepath.EvalSymlinks(mount); err != nil || real != m.mount {
			return nil, fmt.Errorf("cgroup v1 %s is mounted at %s, not at %s", c, m.mount, mount)
		}
		dir := filepath.Join(mount, base)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
		}
		// access(2) rather than a probe directory: making and removing a
		// v1 memory cgroup costs a sandbox's start-up more.
		if err := unix.Access(dir, unix.W_OK); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s %s is not writable: %w", c, dir, err)
		}
		p.mounts[c], p.own[c], p.base[c] = mount, own[string(c)], base
		if parent.Name != "" {
			if err := makeV1Parent(filepath.Join(dir, parent.Name), c == cgroup1.Cpu, parent.CPUQuota); err != nil {
				return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
			}
			p.own[c], p.base[c] = filepath.Join(p.own[c], parent.Name), filepath.Join(base, parent.Name)
		}
		if c == cgroup1.Cpu {
			p.ceilQuota, p.ceilPeriod = v1QuotaCeiling(filepath.Join(mount, p.base[c]), mount)
		}
	}
	if len(p.mounts) == 0 && p.v2 == nil {
		return nil, errors.New("no cgroup v1 memory, pids or cpu hierarchy")
	}
	if _, ok := p.mounts[cgroup1.Memory]; ok {
		_, err := os.Stat(filepath.Join(p.mounts[cgroup1.Memory], p.base[cgroup1.Memory], "memory.memsw.limit_in_bytes"))
		p.memsw = err == nil
	}
	return p, nil
}

// wanted lists the v1 hierarchies the limits need: each one joined costs
// a directory and a migration. Without a v2 directory to count and kill
// the group by, the pids hierarchy is joined in any case.
func (p *cgroup1Placer) wanted() []cgroup1.Name {
	var out []cgroup1.Name
	if p.limits.MemoryMax > 0 {
		out = append(out, cgroup1.Memory)
	}
	if p.limits.TasksMax > 0 || p.v2 == nil {
		out = append(out, cgroup1.Pids)
	}
	if p.limits.CPUWeight > 0 || p.limits.CPUQuota > 0 {
		out = append(out, cgroup1.Cpu)
	}
	return out
}

// killOnlyV2 returns a placer of v2 directories (in the v2 tree of ms) with no controllers, to
// clone into and kill by (in parent, if named), or nil when the v2 tree
// is not writable. Unlike newCgroupPlacer it makes no probe directory:
// access(2) tells, cheaper. It fails only when it cannot make the parent.
func killOnlyV2(ms cgroupMounts, prefix string, parent Parent) (*cgroupPlacer, error) {
	mount, err := ms.cgroup2()
	if err != nil {
		return nil, nil
	}
	own, err := ownCgroup2Path()
	if err != nil {
		return nil, nil
	}
	dir := filepath.Join(mount, own)
	if unix.Access(dir, unix.W_OK) != nil {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil && own != "/" {
		return nil, nil
	}
	p := &cgroupPlacer{mount: mount, base: own, prefix: prefix}
	if parent.Name != "" {
		// No controllers here: the v1 hierarchies hold the limits.
		if err := makeParentDir(filepath.Join(dir, parent.Name)); err != nil {
			return nil, err
		}
		p.base = filepath.Join(own, parent.Name)
	}
	return p, nil
}

// cgroup1Root is where the v1 hierarchies are mounted, one directory each
// (/sys/fs/cgroup/cpu is a symbolic link to cpu,cpuacct where they share one).
const cgroup1Root = "/sys/fs/cgroup"

func (p *cgroup1Placer) Mode() string { return "cgroup-v1" }

// Unenforced lists configured limits whose v1 hierarchy is missing.
func (p *cgroup1Placer) Unenforced() []string {
	var out []string
	has := func(c cgroup1.Name) bool { _, ok := p.mounts[c]; return ok }
	if p.limits.MemoryMax > 0 && !has(cgroup1.Memory) {
		out = append(out, "MemoryMax")
	}
	if p.limits.TasksMax > 0 && !has(cgroup1.Pids) {
		out = append(out, "TasksMax")
	}
	if p.limits.CPUWeight > 0 && !has(cgroup1.Cpu) {
		out = append(out, "CPUWeight")
	}
	if p.limits.CPUQuota > 0 && !has(cgroup1.Cpu) {
		out = append(out, "CPUQuota")
	}
	return out
}

// resources are the limits in the runtime-spec form cgroup1 writes.
func (p *cgroup1Placer) resources() *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if p.limits.MemoryMax > 0 {
		m := p.limits.MemoryMax
		r.Memory = &specs.LinuxMemory{Limit: &m}
		if p.memsw {
			// memory+swap equal to memory: nothing beyond the limit is
			// swapped out instead of killed.
			sw := m
			r.Memory.Swap = &sw
		}
	}
	if p.limits.TasksMax > 0 {
		n := p.limits.TasksMax
		r.Pids = &specs.LinuxPids{Limit: &n}
	}
	if p.limits.CPUWeight > 0 || p.limits.CPUQuota > 0 {
		r.CPU = &specs.LinuxCPU{}
		if w := p.limits.CPUWeight; w > 0 {
			// systemd's mapping of CPUWeight= (1..10000, default 100)
			// to cpu.shares (2..262144, default 1024).
			shares := min(max(w*1024/100, 2), 262144)
			r.CPU.Shares = &shares
		}
		if p.limits.CPUQuota > 0 {
			period := uint64(cpuPeriodUSec)
			quota := clampQuota(int64(p.limits.CPUQuota*cpuPeriodUSec/100), p.ceilQuota, p.ceilPeriod)
			r.CPU.Period, r.CPU.Quota = &period, &quota
		}
	}
	return r
}

// hierarchy lists the v1 subsystems this placer uses.
func (p *cgroup1Placer) hierarchy() ([]cgroup1.Subsystem, error) {
	var out []cgroup1.Subsystem
	for _, c := range cgroup1Controllers {
		if _, ok := p.mounts[c]; !ok {
			continue
		}
		switch c {
		case cgroup1.Memory:
			out = append(out, cgroup1.NewMemory(cgroup1Root, cgroup1.OptionalSwap()))
		case cgroup1.Pids:
			out = append(out, cgroup1.NewPids(cgroup1Root))
		case cgroup1.Cpu:
			out = append(out, cgroup1.NewCpu(cgroup1Root))
		}
	}
	return out, nil
}

// NewGroup makes the group's v2 directory at once and its v1 directories
// in the background; Started waits for them (and reports their failure),
// as do Signal, Kill, Count and Release.
func (p *cgroup1Placer) NewGroup(id string) (Group, error) {
	name := p.prefix + "-" + id
	g := &cgroup1Group{name: name, paths: map[string]string{}, made: make(chan struct{})}
	for c := range p.mounts {
		g.dirs = append(g.dirs, filepath.Join(p.mounts[c], p.base[c], name))
		g.paths[string(c)] = filepath.Join(p.own[c], name)
	}
	slices.Sort(g.dirs)
	if p.v2 != nil {
		v2, err := p.v2.NewGroup(id)
		if err != nil {
			return nil, err
		}
		g.v2 = v2.(*cgroupGroup)
	}
	// The v1 directories (a memory cgroup is the dearest to make) are made
	// while the caller starts the process, which joins them in Started:
	// v1 has no CLONE_INTO_CGROUP, the process is moved in anyway.
	path := func(c cgroup1.Name) (string, error) { return filepath.Join(p.base[c], name), nil }
	go func() {
		defer close(g.made)
		cg, err := cgroup1.New(path, p.resources(), cgroup1.WithHierarchy(p.hierarchy))
		if err != nil {
			// cgroup1.New leaves what it made: remove the empty directories.
			for _, d := range g.dirs {
				_ = os.Remove(d)
			}
			g.err = fmt.Errorf("create cgroup v1 %s: %w", name, err)
			return
		}
		g.cg = cg
	}()
	return g, nil
}

// cgroup1Group is a child's directories in the v1 hierarchies (and its v2
// directory, if any).
type cgroup1Group struct {
	made  chan struct{} // closed once the v1 directories are made (cg) or not (err)
	cg    cgroup1.Cgroup
	err   error
	name  string
	dirs  []string          // the v1 directories
	paths map[string]string // controller → path, as /proc/PID/cgroup shows it
	v2    *cgroupGroup      // nil: no v2 tree
}

// V1Paths maps each v1 controller the group uses to the cgroup path a
// member shows for it in /proc/PID/cgroup, for callers that check the
// placement took.
func (g *cgroup1Group) V1Paths() map[string]string { return g.paths }

func (g *cgroup1Group) Prepare(cmd *exec.Cmd) error {
	if g.v2 != nil {
		return g.v2.Prepare(cmd)
	}
	return nil
}

// Started moves pid into each v1 directory. A v1 hierarchy has no
// CLONE_INTO_CGROUP: the process must not fork before this returns.
func (g *cgroup1Group) Started(ctx context.Context, pid int) error {
	if g.v2 != nil {
		if err := g.v2.Started(ctx, pid); err != nil {
			return err
		}
	}
	if <-g.made; g.err != nil {
		return g.err
	}
	if err := g.cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("move pid %d into cgroup v1 %s: %w", pid, g.name, err)
	}
	return nil
}

func (g *cgroup1Group) String() string {
	s := "cgroup v1 " + strings.Join(g.dirs, " ")
	if g.v2 != nil {
		s += " and " + g.v2.path
	}
	return s
}

// pids lists the group's processes, from the v2 directory and every v1 one.
func (g *cgroup1Group) pids() []int {
	<-g.made
	var out []int
	if g.v2 != nil {
		if procs, err := g.v2.m.Procs(true); err == nil {
			for _, p := range procs {
				out = append(out, int(p))
			}
		}
	}
	for _, d := range g.dirs {
		out = appendProcs(out, d)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// appendProcs appends the pids in dir's cgroup.procs and in those of its
// child cgroups. (cgroup1's Processes stats every file of every directory
// on the way; this reads the directories only, for a cheaper teardown.)
func appendProcs(out []int, dir string) []int {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			out = appendProcs(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func (g *cgroup1Group) Signal(sig syscall.Signal) error {
	for _, pid := range g.pids() {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %d: %w", pid, err)
		}
	}
	return nil
}

// Kill kills the whole group at once through cgroup.kill when it has a v2
// directory, and signals whatever the v1 hierarchies still list (forks that
// raced the signal are caught on the next round) until none is left.
func (g *cgroup1Group) Kill(ctx context.Context) error {
	if g.v2 != nil {
		if err := g.v2.m.Kill(); err != nil {
			return fmt.Errorf("kill %s: %w", g.v2.path, err)
		}
	}
	return waitEmpty(ctx, g, func() error { return g.Signal(syscall.SIGKILL) })
}

func (g *cgroup1Group) Count() int { return len(g.pids()) }

// Release removes the v1 directories and the v2 one. (cgroup1's Delete
// stats every file of the tree first; rmdir alone is what the kernel
// needs, and it refuses while a process is left.)
func (g *cgroup1Group) Release() error {
	<-g.made
	var errs []error
	if g.v2 != nil {
		if err := g.v2.Release(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range g.dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup v1 %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupDir removes a v1 cgroup directory and any child cgroups,
// deepest first, retrying for half a second while the kernel still counts
// an exiting process in one. A directory already gone is not an error.
func removeCgroupDir(dir string) error {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var err error
	for range 50 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}
