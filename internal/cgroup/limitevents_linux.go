package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// atTaskLimit reports whether the pids cgroup dir held, at its peak, at
// least its limit less TasksPeakSlack (false without pids.peak, Linux
// before 6.7, or without a limit).
func atTaskLimit(dir string) bool {
	read := func(f string) (uint64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	peak, ok1 := read("pids.peak")
	limit, ok2 := read("pids.max")
	return ok1 && ok2 && peak > 0 && peak+TasksPeakSlack >= limit
}

// LimitEventsOf reads the limit counters of the cgroup process pid is in:
// memory.events oom_kill and pids.events max in the unified hierarchy, or
// memory.oom_control oom_kill and pids.events max in the v1 ones (hybrid
// hosts), with pids.peak (see LimitEvents.TasksMax). A counter the host
// does not have reads 0.
func LimitEventsOf(pid int) (LimitEvents, error) {
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return LimitEvents{}, fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	mounts, err := readMounts()
	if err != nil {
		return LimitEvents{}, err
	}
	// dirOf finds controller c's directory of the cgroup ("" for v2).
	dirOf := func(c string) (string, bool) {
		for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			v2 := parts[0] == "0" && parts[1] == ""
			if !v2 && !strings.Contains(","+parts[1]+",", ","+c+",") {
				continue
			}
			for _, m := range mounts {
				ok := m.FSType == "cgroup2" && v2
				if m.FSType == "cgroup" && !v2 {
					ok = strings.Contains(","+m.VFSOptions+",", ","+c+",")
				}
				if !ok {
					continue
				}
				rel, found := strings.CutPrefix(parts[2], strings.TrimSuffix(m.Root, "/"))
				if !found {
					continue
				}
				d := filepath.Join(m.Mountpoint, rel)
				if v2 {
					if _, err := os.Stat(filepath.Join(d, c+".events")); err != nil {
						continue
					}
				}
				return d, v2
			}
		}
		return "", false
	}
	var ev LimitEvents
	if d, v2 := dirOf("memory"); d != "" {
		file := "memory.oom_control"
		if v2 {
			file = "memory.events"
		}
		ev.OOMKills = counter(filepath.Join(d, file), "oom_kill")
	}
	if d, _ := dirOf("pids"); d != "" {
		ev.TasksMax = counter(filepath.Join(d, "pids.events"), "max")
		if ev.TasksMax == 0 && atTaskLimit(d) {
			ev.TasksMax = 1
		}
	}
	return ev, nil
}

// counter reads "key N" from a cgroup events file (0 if absent).
func counter(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
