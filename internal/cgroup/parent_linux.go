package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Parent is a cgroup directory that holds the groups of a placer made
// with it, shared with every placer, of this process or another, that
// names it at the same place: a limit set on it bounds all their groups
// together. The sandbox engine's is soda-sandbox.slice (the name systemd
// gives the sandboxes' slice): its CPU quota keeps all sandboxes together
// to the host's CPUs but one, as each one's own quota keeps it.
//
// The parent is made in each hierarchy the placer writes, at the place its
// groups went without one (below the caller's own cgroup), if it is not
// there yet; it holds no process itself, and it is never removed: neither
// by a group's Release nor by a sweep (its name cannot start with the
// prefix and "-", see check). The zero Parent is none: groups are made at
// the placer's base.
type Parent struct {
	// Name is the directory's name: one path element that does not start
	// with the placer's prefix and "-".
	Name string
	// CPUQuota is the CPU quota of all the groups together, in percent of
	// one CPU (0: none): written to the parent's cpu.max (cgroup v2) or
	// cpu.cfs_quota_us over a 100 ms cpu.cfs_period_us (v1) only while
	// those hold the kernel's default, no quota ("max", -1). Any other
	// value was set by an operator (or by an earlier soda, from the same
	// figure) and is kept: that is how an operator changes the collective
	// quota (docs/sandbox.md, "Host cost"). On cgroup v1, where the kernel
	// refuses a child's quota above its parent's, a group's own quota is
	// capped to the parent's.
	CPUQuota uint64
}

// check says whether p can be the parent of groups named prefix-ID.
func (p Parent) check(prefix string) error {
	if p.Name == "" {
		return nil
	}
	if p.Name == "." || p.Name == ".." || strings.ContainsAny(p.Name, "/\n\x00") {
		return fmt.Errorf("cgroup parent %q: not one path element", p.Name)
	}
	if strings.HasPrefix(p.Name, prefix+"-") {
		return fmt.Errorf("cgroup parent %q: starts with %s-, which the sweep of leftover groups removes", p.Name, prefix)
	}
	return nil
}

// makeParentDir makes the parent directory dir unless it is there
// already: a concurrent soda process may be making it at the same time.
func makeParentDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make the cgroup parent %s: %w", dir, err)
	}
	return nil
}

// v2ParentCPUMax says what to write to a parent's cpu.max, which holds
// cur, for a collective quota of pct percent of one CPU: ok is false when
// cur holds a quota already (an operator's, or the one soda wrote).
func v2ParentCPUMax(cur string, pct uint64) (write string, ok bool, err error) {
	f := strings.Fields(cur)
	if len(f) != 2 {
		return "", false, fmt.Errorf("cpu.max %q: want QUOTA PERIOD", strings.TrimSpace(cur))
	}
	if f[0] != "max" {
		if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
			return "", false, fmt.Errorf("cpu.max %q: %w", strings.TrimSpace(cur), err)
		}
		return "", false, nil
	}
	return fmt.Sprintf("%d %d", pct*cpuPeriodUSec/100, cpuPeriodUSec), true, nil
}

// v1ParentQuota says what to write to a parent's cpu.cfs_quota_us, which
// holds cur, for a collective quota of pct percent of one CPU over a
// cpuPeriodUSec period: ok is false when cur holds a quota already.
func v1ParentQuota(cur string, pct uint64) (quotaUS int64, ok bool, err error) {
	q, err := strconv.ParseInt(strings.TrimSpace(cur), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cpu.cfs_quota_us %q: %w", strings.TrimSpace(cur), err)
	}
	if q >= 0 {
		return 0, false, nil
	}
	return int64(pct * cpuPeriodUSec / 100), true, nil
}

// minCFSQuotaUSec is the smallest quota the kernel accepts (1 ms).
const minCFSQuotaUSec = 1000

// clampQuota caps a quota of quotaUS per cpuPeriodUSec to the share of
// a CPU that ceilQuota per ceilPeriod (an ancestor's; ceilQuota <= 0:
// none) allows, rounded down, and at least the kernel's minimum. Cgroup
// v1 refuses (EINVAL) a child's quota above its nearest limited
// ancestor's; v2 takes the smaller by itself.
func clampQuota(quotaUS, ceilQuota, ceilPeriod int64) int64 {
	if ceilQuota <= 0 || ceilPeriod <= 0 {
		return quotaUS
	}
	return max(min(quotaUS, ceilQuota*cpuPeriodUSec/ceilPeriod), minCFSQuotaUSec)
}

// makeV1Parent makes the parent dir in a v1 hierarchy and, in the cpu
// one (cpu set), gives it the collective quota of pct percent unless it
// has a quota already.
func makeV1Parent(dir string, cpu bool, pct uint64) error {
	if err := makeParentDir(dir); err != nil {
		return err
	}
	if !cpu || pct == 0 {
		return nil
	}
	qf := filepath.Join(dir, "cpu.cfs_quota_us")
	b, err := os.ReadFile(qf)
	if err != nil {
		return fmt.Errorf("read the cgroup parent's quota: %w", err)
	}
	q, ok, err := v1ParentQuota(string(b), pct)
	if err != nil || !ok {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cpuPeriodUSec)), 0); err != nil {
		return fmt.Errorf("set the cgroup parent's CPU period: %w", err)
	}
	if err := os.WriteFile(qf, []byte(strconv.FormatInt(q, 10)), 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("set the sandboxes' collective CPU quota %d µs in %s: %w (an ancestor's, or a group's within, is lower?)", q, qf, err)
		}
		return fmt.Errorf("set the collective CPU quota in %s: %w", qf, err)
	}
	return nil
}

// v1QuotaCeiling is the quota and period of the nearest cgroup from dir
// up to top (a v1 cpu hierarchy's mount) that has one: what the kernel
// holds a new child of dir's quota to. ceilQuota is -1 when none has.
func v1QuotaCeiling(dir, top string) (ceilQuota, ceilPeriod int64) {
	for d := dir; ; d = filepath.Dir(d) {
		q, errQ := readInt(filepath.Join(d, "cpu.cfs_quota_us"))
		p, errP := readInt(filepath.Join(d, "cpu.cfs_period_us"))
		if errQ == nil && errP == nil && q > 0 && p > 0 {
			return q, p
		}
		if d == top || len(d) <= len(top) || d == "/" {
			return -1, 0
		}
	}
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// makeV2Parent makes the parent dir in the v2 tree, below a cgroup whose
// cgroup.subtree_control lists above, enables for its groups those of
// the memory, pids and cpu controllers it may (the ones above hands down
// to it), and, where it has the cpu controller, gives it the
// collective quota of pct percent unless it has a quota already. It
// returns the controllers the parent hands down.
func makeV2Parent(dir string, above []string, pct uint64) ([]string, error) {
	if err := makeParentDir(dir); err != nil {
		return nil, err
	}
	sc := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(sc)
	if err != nil {
		return nil, fmt.Errorf("read the cgroup parent's controllers: %w", err)
	}
	have := strings.Fields(string(b))
	for _, c := range []string{"memory", "pids", "cpu"} {
		if slices.Contains(above, c) && !slices.Contains(have, c) {
			if err := os.WriteFile(sc, []byte("+"+c), 0); err != nil {
				return nil, fmt.Errorf("enable %s for the groups in %s: %w", c, sc, err)
			}
			have = append(have, c)
		}
	}
	if pct == 0 || !slices.Contains(above, "cpu") {
		return have, nil
	}
	mf := filepath.Join(dir, "cpu.max")
	if b, err = os.ReadFile(mf); err != nil {
		return nil, fmt.Errorf("read the cgroup parent's quota: %w", err)
	}
	w, ok, err := v2ParentCPUMax(string(b), pct)
	if err != nil || !ok {
		return have, err
	}
	if err := os.WriteFile(mf, []byte(w), 0); err != nil {
		return nil, fmt.Errorf("set the collective CPU quota in %s: %w", mf, err)
	}
	return have, nil
}
