package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// cgroupMounts are the cgroup (v1) and cgroup2 mounts of a mount table,
// in its order, with the kernel's octal escapes (\040 for a space) undone.
// Everything that needs to know where the cgroup file systems are (the v2
// tree, the v1 hierarchies, systemd's named hierarchy, the sweep, a
// process's limit counters) asks readMounts and reads these.
type cgroupMounts []*mountinfo.Info

// readMounts reads the cgroup mounts of this process's mount namespace:
// the one place /proc/self/mountinfo is read.
func readMounts() (cgroupMounts, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	return parseMounts(f)
}

// parseMounts reads the cgroup mounts of mountinfo r.
func parseMounts(r io.Reader) (cgroupMounts, error) {
	mounts, err := mountinfo.GetMountsFromReader(r, mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

// Cgroup2Mount finds the cgroup v2 mount point (/sys/fs/cgroup on unified
// hosts, /sys/fs/cgroup/unified on hybrid ones).
func Cgroup2Mount() (string, error) {
	ms, err := readMounts()
	if err != nil {
		return "", err
	}
	return ms.cgroup2()
}

// cgroup2 finds the first cgroup v2 mount point (/sys/fs/cgroup on
// unified hosts, /sys/fs/cgroup/unified on hybrid ones).
func (ms cgroupMounts) cgroup2() (string, error) {
	for _, m := range ms {
		if m.FSType == "cgroup2" {
			return m.Mountpoint, nil
		}
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// v1Mount is where a v1 hierarchy is mounted and which of its cgroups is
// the mount's root.
type v1Mount struct{ mount, root string }

// v1 maps each v1 controller (each super option, in fact) to its mount.
func (ms cgroupMounts) v1() map[string]v1Mount {
	out := map[string]v1Mount{}
	for _, m := range ms {
		if m.FSType != "cgroup" {
			continue
		}
		for o := range strings.SplitSeq(m.VFSOptions, ",") {
			if _, seen := out[o]; !seen && o != "" {
				out[o] = v1Mount{mount: m.Mountpoint, root: m.Root}
			}
		}
	}
	return out
}
