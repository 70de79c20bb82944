package sandboxinit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// What the sandbox can see of the host: the parts of /proc and /sys that
// are not per namespace and name the machine (its machine-id, its boot,
// its kernel command line, its network devices and disks) are replaced or
// hidden; the cgroup hierarchies are shown rooted at the sandbox's own
// cgroup. docs/sandbox.md ("What the sandbox can see of the host") lists
// what stays visible and why.

// maskedSys are sysfs directories covered with an empty read-only tmpfs:
// the host's disks (names, sizes, serial numbers, partitions). The fresh
// sysfs of the sandbox's network namespace already shows no network
// device but lo (/sys/class/net, /sys/devices/virtual/net and the net/
// directories of PCI devices are per network namespace).
var maskedSys = []string{"/sys/block", "/sys/class/block", "/sys/dev/block"}

// mountSys mounts a fresh, read-only sysfs at /sys. Mounted from init's
// network namespace, it lists only that namespace's devices; it brings
// none of the host's submounts (securityfs, debugfs, tracefs, bpf,
// configfs, pstore, the cgroups). A user-namespaced init may mount it as
// it owns the network namespace and the host's /sys is fully visible in
// its mount namespace (below the old root).
func mountSys() error {
	if err := os.Mkdir("/sys", 0o555); err != nil {
		return err
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /sys of the sandbox's network namespace: %w", err)
	}
	for _, p := range maskedSys {
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("soda-empty", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=4k"); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	return nil
}

// identityFiles are the files that name this machine or this boot,
// replaced by per-sandbox values: a machine-id (systemd, D-Bus, telemetry
// and licensing code use it as the machine's identity), the boot id and
// the kernel command line (which can carry root=UUID=, host names, cloud
// instance ids). Missing files are skipped; /var/lib/dbus/machine-id only
// when it is a file of its own (often a link to /etc/machine-id).
func identityFiles() (map[string]string, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	var boot [16]byte
	if _, err := rand.Read(boot[:]); err != nil {
		return nil, err
	}
	boot[6] = boot[6]&0x0f | 0x40 // UUID version 4, as the kernel's
	boot[8] = boot[8]&0x3f | 0x80
	b := hex.EncodeToString(boot[:])
	return map[string]string{
		"/etc/machine-id":                 hex.EncodeToString(id[:]) + "\n",
		"/var/lib/dbus/machine-id":        hex.EncodeToString(id[:]) + "\n",
		"/proc/sys/kernel/random/boot_id": b[0:8] + "-" + b[8:12] + "-" + b[12:16] + "-" + b[16:20] + "-" + b[20:] + "\n",
		"/proc/cmdline":                   "\n",
	}, nil
}

// maskIdentity binds the identityFiles, read-only, over the host's. The
// sources are written on the root tmpfs and unlinked once bound, so they
// appear nowhere else.
func maskIdentity() error {
	files, err := identityFiles()
	if err != nil {
		return fmt.Errorf("sandbox identity: %w", err)
	}
	for dst, content := range files {
		fi, err := os.Lstat(dst)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		src := "/.soda-" + filepath.Base(dst)
		if err := os.WriteFile(src, []byte(content), 0o444); err != nil {
			return fmt.Errorf("replace %s: %w", dst, err)
		}
		err = unix.Mount(src, dst, "", unix.MS_BIND, "")
		if err == nil {
			err = setAttr(dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, false)
		}
		if rerr := os.Remove(src); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("replace %s: %w", dst, err)
		}
	}
	return nil
}

// cgroupMount is one cgroup hierarchy below /sys/fs/cgroup: "" for a
// cgroup2 mounted at /sys/fs/cgroup itself.
type cgroupMount struct {
	Dir     string // below /sys/fs/cgroup ("" for itself)
	FSType  string // cgroup2 or cgroup (v1)
	Options string // v1: the controllers or name= of the hierarchy
}

// cgroupLayout is how the host mounts its cgroups: cgroup2 at
// /sys/fs/cgroup (unified), or a tmpfs there with one directory per
// hierarchy (hybrid, legacy) and links for co-mounted controllers
// (cpu -> cpu,cpuacct).
type cgroupLayout struct {
	Tmpfs  bool
	Mounts []cgroupMount
	Links  map[string]string
}

// hostCgroupLayout reads how /sys/fs/cgroup is mounted in init's mount
// namespace (a copy of the host's), before the pivot; nil when it is not.
func hostCgroupLayout() *cgroupLayout {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	l := parseCgroupLayout(f)
	if l != nil && l.Tmpfs {
		ents, _ := os.ReadDir(cgroupTop)
		for _, e := range ents {
			if e.Type()&os.ModeSymlink == 0 {
				continue
			}
			if t, err := os.Readlink(filepath.Join(cgroupTop, e.Name())); err == nil && !strings.Contains(t, "/") {
				if l.Links == nil {
					l.Links = map[string]string{}
				}
				l.Links[e.Name()] = t
			}
		}
	}
	return l
}

// cgroupTop is where cgroups are mounted.
const cgroupTop = "/sys/fs/cgroup"

// parseCgroupLayout reads the cgroup mounts at and below /sys/fs/cgroup
// from a mountinfo file (github.com/moby/sys/mountinfo, which undoes its
// octal escapes); nil when nothing usable is mounted there or the file
// cannot be read.
func parseCgroupLayout(r io.Reader) *cgroupLayout {
	const top = cgroupTop
	mounts, err := mountinfo.GetMountsFromReader(r, mountinfo.PrefixFilter(top))
	if err != nil {
		return nil
	}
	var l cgroupLayout
	found := false
	for _, m := range mounts { // in mountinfo order
		mp, fstype := m.Mountpoint, m.FSType
		switch {
		case mp == top:
			// A later mount on the same point hides the earlier one.
			found, l = true, cgroupLayout{Tmpfs: fstype == "tmpfs"}
			if fstype == "cgroup2" {
				l.Mounts = []cgroupMount{{FSType: "cgroup2"}}
			}
		case found && l.Tmpfs && strings.HasPrefix(mp, top+"/") && !strings.Contains(mp[len(top)+1:], "/") && (fstype == "cgroup" || fstype == "cgroup2"):
			cm := cgroupMount{Dir: mp[len(top)+1:], FSType: fstype}
			if fstype == "cgroup" {
				var opts []string
				for _, o := range strings.Split(m.VFSOptions, ",") {
					if o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent=") {
						continue
					}
					opts = append(opts, o)
				}
				cm.Options = strings.Join(opts, ",")
			}
			l.Mounts = append(l.Mounts, cm)
		}
	}
	if !found || (!l.Tmpfs && len(l.Mounts) == 0) {
		return nil
	}
	return &l
}

// mountCgroupFS mounts the cgroup hierarchies at /sys/fs/cgroup as the
// host has them, read-only. It runs on the thread that forks the command,
// after that thread entered the sandbox's cgroup namespace: each hierarchy
// is then rooted at the sandbox's cgroup (memory.max at the top is the
// sandbox's limit, which Go, Node and the JVM read), and nothing above it
// shows. It describes what it mounted.
func mountCgroupFS(l *cgroupLayout) (string, error) {
	const top = "/sys/fs/cgroup"
	if l == nil {
		return "/sys/fs/cgroup empty (the host mounts no cgroup there)", nil
	}
	fail := func(err error) (string, error) {
		_ = unix.Unmount(top, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return "/sys/fs/cgroup empty", err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if l.Tmpfs {
		if err := unix.Mount("soda-cgroup", top, "tmpfs", flags, "mode=0755,size=64k"); err != nil {
			return fail(fmt.Errorf("mount tmpfs on %s: %w", top, err))
		}
	}
	var names []string
	for _, m := range l.Mounts {
		dst := filepath.Join(top, m.Dir)
		if m.Dir != "" {
			if err := os.Mkdir(dst, 0o755); err != nil {
				return fail(err)
			}
		}
		if err := unix.Mount(m.FSType, dst, m.FSType, flags, m.Options); err != nil {
			return fail(fmt.Errorf("mount %s (%s %s): %w", dst, m.FSType, m.Options, err))
		}
		names = append(names, m.Dir)
	}
	for name, target := range l.Links {
		if err := os.Symlink(target, filepath.Join(top, name)); err != nil && !errors.Is(err, os.ErrExist) {
			return fail(err)
		}
	}
	if err := setAttr(top, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true); err != nil {
		return fail(fmt.Errorf("make %s read-only: %w", top, err))
	}
	if len(l.Mounts) == 1 && l.Mounts[0].Dir == "" {
		return "/sys/fs/cgroup: cgroup2, read-only, rooted at the sandbox's cgroup", nil
	}
	return fmt.Sprintf("/sys/fs/cgroup: tmpfs with %d hierarchies (%s), read-only, rooted at the sandbox's cgroup", len(l.Mounts), strings.Join(names, ", ")), nil
}
