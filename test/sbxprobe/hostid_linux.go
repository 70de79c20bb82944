package main

// Row 25: what names the host. The sandbox must not see the host's cgroup
// paths, machine-id, boot id, kernel command line, network devices (and
// their MAC addresses) or disks. The harness passes the host's values;
// each row is blocked when what the sandbox reads differs from them.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// hostIDProbes is row 25.
func (b *battery) hostIDProbes() []probe {
	c := b.cfg
	ps := []probe{{row: 25, name: "host-cgroup-path", run: cgroupPathProbe}}
	same := func(name, file, host, flag string) probe {
		p := probe{row: 25, name: name}
		if host == "" {
			p.skip = "no --" + flag + " given"
			return p
		}
		p.run = func() Result { return sameContent(file, host) }
		return p
	}
	ps = append(ps,
		same("host-machine-id", "/etc/machine-id", c.hostMachineID, "host-machine-id"),
		same("host-dbus-machine-id", "/var/lib/dbus/machine-id", c.hostMachineID, "host-machine-id"),
		same("host-boot-id", "/proc/sys/kernel/random/boot_id", c.hostBootID, "host-boot-id"),
	)
	cmdline := probe{row: 25, name: "host-cmdline"}
	if c.hostCmdlineSHA == "" {
		cmdline.skip = "no --host-cmdline-sha256 given"
	} else {
		cmdline.run = func() Result { return cmdlineProbe(c.hostCmdlineSHA) }
	}
	macs := probe{row: 25, name: "host-macs"}
	if len(c.hostMACs) == 0 {
		macs.skip = "no --host-macs given"
	} else {
		macs.run = func() Result { return macProbe(c.hostMACs) }
	}
	return append(ps, cmdline,
		probe{row: 25, name: "sys-net-devices", run: netDevProbe},
		macs,
		probe{row: 25, name: "sys-block", run: blockProbe},
		probe{row: 25, name: "proc-uptime", info: true, run: func() Result {
			up, err := readTrim("/proc/uptime")
			return Result{Detail: fmt.Sprintf("/proc/uptime %q (%v): the host's boot time (no time namespace)", up, err)}
		}},
		probe{row: 25, name: "mountinfo-overlay", info: true, run: overlayProbe},
	)
}

// cgroupPathProbe is blocked when every line of /proc/self/cgroup names
// "/": the sandbox has a cgroup namespace rooted at its own cgroup.
func cgroupPathProbe() Result {
	data, err := readTrim("/proc/self/cgroup")
	if err != nil {
		return attempt("read /proc/self/cgroup", err)
	}
	var paths []string
	for _, l := range strings.Split(data, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && parts[2] != "/" {
			paths = append(paths, l)
		}
	}
	if len(paths) == 0 {
		return Result{Blocked: true, Detail: "/proc/self/cgroup shows only / (own cgroup namespace)"}
	}
	return Result{Detail: fmt.Sprintf("/proc/self/cgroup shows %d host cgroup path(s), e.g. %s", len(paths), paths[0]), List: paths}
}

// sameContent is blocked when file is missing, unreadable or not host.
func sameContent(file, host string) Result {
	v, err := readTrim(file)
	if err != nil {
		return attempt("read "+file, err)
	}
	if v == strings.TrimSpace(host) {
		return Result{Detail: fmt.Sprintf("%s is the host's (%s)", file, v)}
	}
	return Result{Blocked: true, Detail: fmt.Sprintf("%s is %q, not the host's", file, v)}
}

// cmdlineProbe is blocked when /proc/cmdline is not the host's (compared
// by SHA-256, so that the harness need not quote the host's line).
func cmdlineProbe(hostSHA string) Result {
	data, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return attempt("read /proc/cmdline", err)
	}
	sum := sha256.Sum256(data)
	if strings.EqualFold(hex.EncodeToString(sum[:]), strings.TrimSpace(hostSHA)) {
		return Result{Detail: fmt.Sprintf("/proc/cmdline is the host's kernel command line (%d bytes)", len(data))}
	}
	return Result{Blocked: true, Detail: fmt.Sprintf("/proc/cmdline is not the host's (%q)", strings.TrimSpace(string(data)))}
}

// netDevices lists the network devices sysfs shows: /sys/class/net and
// every net/ directory below /sys/devices (PCI devices, virtual ones).
func netDevices() map[string]string {
	devs := map[string]string{} // name -> its directory
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			devs[e.Name()] = filepath.Join("/sys/class/net", e.Name())
		}
	}
	_ = filepath.WalkDir("/sys/devices", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 9 {
			return fs.SkipDir
		}
		if d.Name() == "net" {
			ents, _ := os.ReadDir(p)
			for _, e := range ents {
				devs[e.Name()] = filepath.Join(p, e.Name())
			}
			return fs.SkipDir
		}
		return nil
	})
	return devs
}

// netDevProbe is blocked when sysfs shows no network device but lo.
func netDevProbe() Result {
	var others []string
	for name, dir := range netDevices() {
		if name != "lo" {
			others = append(others, dir)
		}
	}
	slices.Sort(others)
	if len(others) == 0 {
		return Result{Blocked: true, Detail: "sysfs shows no network device but lo"}
	}
	return Result{Detail: fmt.Sprintf("sysfs shows %d network device(s) besides lo: %s", len(others), strings.Join(others, ", ")), List: others}
}

// macProbe is blocked when no address sysfs shows is one of the host's.
func macProbe(host []string) Result {
	var found []string
	for name, dir := range netDevices() {
		a, err := readTrim(filepath.Join(dir, "address"))
		if err != nil {
			continue
		}
		for _, h := range host {
			if strings.EqualFold(a, h) {
				found = append(found, name+" "+a)
			}
		}
	}
	slices.Sort(found)
	if len(found) == 0 {
		return Result{Blocked: true, Detail: fmt.Sprintf("none of the host's %d MAC addresses is visible", len(host))}
	}
	return Result{Detail: "the host's MAC addresses are visible: " + strings.Join(found, ", "), List: found}
}

// blockProbe is blocked when sysfs lists no block device.
func blockProbe() Result {
	var devs []string
	for _, d := range []string{"/sys/block", "/sys/class/block", "/sys/dev/block"} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			devs = append(devs, filepath.Join(d, e.Name()))
		}
	}
	if len(devs) == 0 {
		return Result{Blocked: true, Detail: "/sys/block, /sys/class/block and /sys/dev/block list nothing"}
	}
	return Result{Detail: fmt.Sprintf("sysfs lists %d block device entries, e.g. %s", len(devs), devs[0]), List: devs}
}

// overlayProbe reports the overlay mounts whose options name host paths
// (upperdir=, lowerdir=): the kernel shows them as the host set them.
func overlayProbe() Result {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return attempt("read /proc/self/mountinfo", err)
	}
	var hits []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.Contains(l, " - overlay ") {
			hits = append(hits, f[4]+": "+f[len(f)-1])
		}
	}
	return Result{Detail: fmt.Sprintf("%d overlay mount(s) whose options name host directories", len(hits)), List: hits}
}
