package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// checkLimits verifies, from /proc/PID/cgroup, that the process sits in a
// cgroup where each requested limit's controller applies. A scope can be
// created with limits that do nothing: on a cgroup v1/v2 hybrid host the
// user manager cannot delegate the v1 memory and pids controllers, so a
// user's scope gets them from user@UID.service, unlimited. v1 hierarchies
// must place the process at the same path as the unified one; a
// controller only on cgroup2 must have its interface file there. want,
// if set, is the path each v1 controller must show instead (a cgroup v1
// group's own directories, which need not match the unified path).
func checkLimits(pid int, l Limits, want map[string]string) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	var unified string
	v1 := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	if unified == "" {
		return fmt.Errorf("pid %d has no cgroup v2 path", pid)
	}
	var missing []string
	need := func(controller, file string) {
		if p, ok := v1[controller]; ok {
			expect := unified
			if w, ok := want[controller]; ok {
				expect = w
			}
			if p != expect {
				missing = append(missing, fmt.Sprintf("%s (cgroup v1 %s puts the sandbox in %s, not in %s)", controller, controller, p, expect))
			}
			return
		}
		for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			if _, err := os.Stat(filepath.Join(mnt, unified, file)); err == nil {
				return
			}
		}
		missing = append(missing, fmt.Sprintf("%s (no %s in %s)", controller, file, unified))
	}
	if l.MemoryMax > 0 {
		need("memory", "memory.max")
	}
	if l.TasksMax > 0 {
		need("pids", "pids.max")
	}
	if l.CPUPercent > 0 {
		need("cpu", "cpu.max")
	}
	if l.CPUWeight > 0 && l.CPUPercent == 0 {
		need("cpu", "cpu.weight")
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("limits not enforced for controllers: %s", strings.Join(missing, "; "))
	}
	return nil
}
