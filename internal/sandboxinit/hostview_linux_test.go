package sandboxinit

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseCgroupLayout(t *testing.T) {
	const sys = "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
	tests := []struct {
		name      string
		mountinfo string
		want      *cgroupLayout
	}{
		{"unified", sys + "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			&cgroupLayout{Mounts: []cgroupMount{{FSType: "cgroup2"}}}},
		{"hybrid", sys +
			"31 22 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd\n" +
			"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n" +
			"42 41 0:39 / /sys/fs/cgroup/unified/deeper rw - cgroup2 cgroup2 rw\n",
			&cgroupLayout{Tmpfs: true, Mounts: []cgroupMount{
				{Dir: "cpu,cpuacct", FSType: "cgroup", Options: "cpu,cpuacct"},
				{Dir: "memory", FSType: "cgroup", Options: "memory"},
				{Dir: "systemd", FSType: "cgroup", Options: "xattr,name=systemd"},
				{Dir: "unified", FSType: "cgroup2"},
			}}},
		{"overmounted: the last mount on the point counts", sys +
			"31 22 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"50 22 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			&cgroupLayout{Mounts: []cgroupMount{{FSType: "cgroup2"}}}},
		{"escaped names are unescaped", sys +
			"31 22 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
			"36 31 0:33 / /sys/fs/cgroup/name\\040x rw - cgroup cgroup rw,name=x\n",
			&cgroupLayout{Tmpfs: true, Mounts: []cgroupMount{{Dir: "name x", FSType: "cgroup", Options: "name=x"}}}},
		{"nothing at /sys/fs/cgroup", sys, nil},
		{"something else at /sys/fs/cgroup", sys + "31 22 0:28 / /sys/fs/cgroup rw - ext4 /dev/vda rw\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseCgroupLayout(strings.NewReader(tt.mountinfo))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseCgroupLayout() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestIdentityFiles(t *testing.T) {
	a, err := identityFiles()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := identityFiles()
	mid := strings.TrimSpace(a["/etc/machine-id"])
	if len(mid) != 32 || strings.Trim(mid, "0123456789abcdef") != "" {
		t.Errorf("machine-id %q: want 32 lower-case hex digits", mid)
	}
	boot := strings.TrimSpace(a["/proc/sys/kernel/random/boot_id"])
	if len(boot) != 36 || boot[14] != '4' || !strings.ContainsAny(boot[19:20], "89ab") {
		t.Errorf("boot_id %q: want a version 4 UUID", boot)
	}
	if a["/etc/machine-id"] == b["/etc/machine-id"] || a["/proc/sys/kernel/random/boot_id"] == b["/proc/sys/kernel/random/boot_id"] {
		t.Errorf("two sandboxes got the same identity")
	}
	if a["/proc/cmdline"] != "\n" {
		t.Errorf("cmdline %q, want an empty line", a["/proc/cmdline"])
	}
}
