package cgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// NewPlacer picks the best isolation the host allows: a cgroup v2 directory
// per child below the bridge's own cgroup when that is writable, else a
// process group per child. It logs one line that says which, and which
// limits can be enforced.
func NewPlacer(log *slog.Logger, prefix string, limits Limits) Placer {
	cp, err := newCgroupPlacer(prefix, limits, Parent{})
	if err != nil {
		log.Warn("child isolation: process groups only (no cgroup v2 subtree): limits are not enforced and a child that leaves its process group cannot be tracked",
			"mode", "process-group", "reason", err.Error())
		return processGroupPlacer{}
	}
	attrs := []any{"mode", "cgroup", "parent", cp.base}
	if missing := cp.unenforced(); len(missing) > 0 {
		attrs = append(attrs, "unenforced_limits", strings.Join(missing, ","))
	}
	log.Info("child isolation: one cgroup v2 directory per child, killed as a whole", attrs...)
	return cp
}

// NewCgroupPlacer returns a placer that creates one cgroup v2 directory per
// child below the caller's own cgroup (in parent there, when it is named),
// or an error saying why it cannot (no cgroup2 mount, the cgroup is not
// writable, the parent cannot be made or given its quota). Unlike
// NewPlacer it never falls back to process groups; callers that must fail
// closed use it.
func NewCgroupPlacer(prefix string, limits Limits, parent Parent) (Placer, error) {
	return newCgroupPlacer(prefix, limits, parent)
}

// NewProcessGroupPlacer returns the placer of last resort: each child in
// its own process group, nothing enforced, a child that leaves its group
// untracked. It can hold a child that already runs (it needs no Prepare).
func NewProcessGroupPlacer() Placer { return processGroupPlacer{} }

// processGroupPlacer isolates each child in its own process group.
type processGroupPlacer struct{}

func (processGroupPlacer) Mode() string { return "process-group" }

func (processGroupPlacer) NewGroup(string) (Group, error) { return &processGroup{}, nil }

// Unenforced returns nil: a process-group placer has no limits to enforce
// (NewPlacer logs that limits are not enforced in this mode).
func (processGroupPlacer) Unenforced() []string { return nil }

type processGroup struct{ pgid int }

func (g *processGroup) Prepare(*exec.Cmd) error { return nil }
func (g *processGroup) Started(_ context.Context, pid int) error {
	g.pgid = pid
	return nil
}
func (g *processGroup) String() string { return "pgid " + strconv.Itoa(g.pgid) }
func (g *processGroup) Release() error { return nil }

func (g *processGroup) Signal(sig syscall.Signal) error {
	if g.pgid <= 0 {
		return nil
	}
	err := syscall.Kill(-g.pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// waitEmpty polls g until it holds no process, running each (if set)
// before every look: the kill that new forks may have escaped.
func waitEmpty(ctx context.Context, g Group, each func() error) error {
	for {
		if each != nil {
			if err := each(); err != nil {
				return err
			}
		}
		if g.Count() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not empty after kill: %w", g, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (g *processGroup) Kill(ctx context.Context) error {
	return waitEmpty(ctx, g, func() error {
		if err := g.Signal(syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill process group %d: %w", g.pgid, err)
		}
		return nil
	})
}

// Count reports the live (non-zombie) members of the process group.
func (g *processGroup) Count() int {
	if g.pgid <= 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pgid, state, err := procPgidState(pid)
		if err == nil && pgid == g.pgid && state != 'Z' {
			n++
		}
	}
	return n
}

func procPgidState(pid int) (int, byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 3 {
		return 0, 0, errors.New("malformed stat")
	}
	pgid, err := strconv.Atoi(f[2])
	return pgid, f[0][0], err
}

// cgroupPlacer creates one cgroup v2 directory per child below base.
type cgroupPlacer struct {
	mount     string // cgroup2 mount point
	base      string // group path relative to mount, e.g. /system.slice/x.service
	prefix    string
	limits    Limits
	available []string // controllers enabled for base's children
}

func newCgroupPlacer(prefix string, limits Limits, parent Parent) (*cgroupPlacer, error) {
	if err := parent.check(prefix); err != nil {
		return nil, err
	}
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	mount, err := mounts.cgroup2()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup2Path()
	if err != nil {
		return nil, err
	}
	p := &cgroupPlacer{mount: mount, base: own, prefix: prefix, limits: limits}
	dir := filepath.Join(mount, own)
	probe := filepath.Join(dir, fmt.Sprintf("%s-probe-%d", prefix, os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup %s is not writable: %w", dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return nil, fmt.Errorf("remove probe cgroup: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil && own != "/" {
		return nil, errors.New("kernel lacks cgroup.kill (needs Linux 5.14)")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil {
		p.available = strings.Fields(string(b))
	}
	if parent.Name != "" {
		handed, err := makeV2Parent(filepath.Join(dir, parent.Name), p.available, parent.CPUQuota)
		if err != nil {
			return nil, err
		}
		p.base, p.available = filepath.Join(own, parent.Name), handed
	}
	return p, nil
}

func (p *cgroupPlacer) Mode() string { return "cgroup" }

// Unenforced lists configured limits whose controller is not available.
func (p *cgroupPlacer) Unenforced() []string { return p.unenforced() }

// unenforced lists configured limits whose controller is not available.
func (p *cgroupPlacer) unenforced() []string {
	var out []string
	if p.limits.MemoryMax > 0 && !slices.Contains(p.available, "memory") {
		out = append(out, "MemoryMax")
	}
	if p.limits.TasksMax > 0 && !slices.Contains(p.available, "pids") {
		out = append(out, "TasksMax")
	}
	if p.limits.CPUWeight > 0 && !slices.Contains(p.available, "cpu") {
		out = append(out, "CPUWeight")
	}
	if p.limits.CPUQuota > 0 && !slices.Contains(p.available, "cpu") {
		out = append(out, "CPUQuota")
	}
	return out
}

// cpuPeriodUSec is the cpu.max period soda uses, the kernel's default.
const cpuPeriodUSec = 100000

func (p *cgroupPlacer) resources() *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if p.limits.MemoryMax > 0 && slices.Contains(p.available, "memory") {
		m := p.limits.MemoryMax
		r.Memory = &cgroup2.Memory{Max: &m}
	}
	if p.limits.TasksMax > 0 && slices.Contains(p.available, "pids") {
		r.Pids = &cgroup2.Pids{Max: p.limits.TasksMax}
	}
	if slices.Contains(p.available, "cpu") && (p.limits.CPUWeight > 0 || p.limits.CPUQuota > 0) {
		r.CPU = &cgroup2.CPU{}
		if p.limits.CPUWeight > 0 {
			w := p.limits.CPUWeight
			r.CPU.Weight = &w
		}
		if p.limits.CPUQuota > 0 {
			period := uint64(cpuPeriodUSec)
			quota := int64(p.limits.CPUQuota * cpuPeriodUSec / 100)
			r.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
		}
	}
	return r
}

func (p *cgroupPlacer) NewGroup(id string) (Group, error) {
	rel := filepath.Join(p.base, p.prefix+"-"+id)
	m, err := cgroup2.NewManager(p.mount, rel, p.resources())
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", rel, err)
	}
	dir, err := os.Open(filepath.Join(p.mount, rel))
	if err != nil {
		_ = m.Delete()
		return nil, fmt.Errorf("open cgroup %s: %w", rel, err)
	}
	return &cgroupGroup{m: m, dir: dir, path: filepath.Join(p.mount, rel)}, nil
}

type cgroupGroup struct {
	m    *cgroup2.Manager
	dir  *os.File
	path string
	pid  int
}

func (g *cgroupGroup) Prepare(cmd *exec.Cmd) error {
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(g.dir.Fd())
	return nil
}

func (g *cgroupGroup) Started(_ context.Context, pid int) error {
	g.pid = pid
	return nil
}

func (g *cgroupGroup) String() string { return "cgroup " + g.path }

// CgroupDir is the group's directory, for the supervisor and the ledger.
func (g *cgroupGroup) CgroupDir() string { return g.path }

// OwnsDir reports true: the placer made the directory, Release removes it.
func (g *cgroupGroup) OwnsDir() bool { return true }

func (g *cgroupGroup) Signal(sig syscall.Signal) error {
	procs, err := g.m.Procs(true)
	if err != nil {
		return fmt.Errorf("list %s: %w", g.path, err)
	}
	for _, pid := range procs {
		if err := syscall.Kill(int(pid), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %d: %w", pid, err)
		}
	}
	return nil
}

func (g *cgroupGroup) Kill(ctx context.Context) error {
	if err := g.m.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", g.path, err)
	}
	return waitEmpty(ctx, g, nil)
}

func (g *cgroupGroup) Count() int {
	procs, err := g.m.Procs(true)
	if err != nil {
		return 0
	}
	return len(procs)
}

func (g *cgroupGroup) Release() error {
	g.dir.Close()
	var err error
	for range 50 {
		if err = g.m.Delete(); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove %s: %w", g.path, err)
}

// ownCgroup2Path returns this process's cgroup v2 path ("0::/path").
func ownCgroup2Path() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}
