package cgroup

import (
	"reflect"
	"strings"
	"testing"
)

// mountinfo excerpts as seen in a systemd-box in each cgroup mode, and
// one with the octal escapes the kernel writes for a space (\040) and a
// backslash (\134) in a path.
const (
	mountinfoHybrid = `76 75 0:46 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs cgroup ro,size=4096k,nr_inodes=1024,mode=755
77 76 0:29 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
80 76 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
84 76 0:36 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
85 76 0:37 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,xattr,name=systemd
86 76 0:38 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
`
	mountinfoUnified = `30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	mountinfoNone = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
`
	mountinfoEscaped = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
76 22 0:46 / /run/my\040cgroups ro,nosuid,nodev,noexec - tmpfs cgroup ro,size=4096k,nr_inodes=1024,mode=755
80 76 0:32 /a\134b /run/my\040cgroups/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
85 76 0:37 /c\040d /run/my\040cgroups/systemd rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,xattr,name=systemd
86 76 0:38 /e\040f /run/my\040cgroups/uni\040fied rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
`
)

func TestReadCgroupFS(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mountinfo string
		want      cgroupFS // v2 is not compared: it is read from the host
		limits    Limits   // with v2 set to v2, enforces all but unenforced
		v2        []string
		unenf     []string
		wantErr   bool
	}{
		{name: "hybrid", mountinfo: mountinfoHybrid,
			want: cgroupFS{unified: "/sys/fs/cgroup/unified", unifiedRoot: "/", named: "/sys/fs/cgroup/systemd", namedRoot: "/",
				v1: []string{"cpu", "memory", "pids"}},
			limits: Limits{MemoryMax: 1, TasksMax: 1, CPUQuota: 1}},
		{name: "unified", mountinfo: mountinfoUnified,
			want:   cgroupFS{unified: "/sys/fs/cgroup", unifiedRoot: "/"},
			limits: Limits{MemoryMax: 1, TasksMax: 1, CPUQuota: 1, CPUWeight: 1}, v2: []string{"cpu", "pids"}, unenf: []string{"MemoryMax"}},
		{name: "none", mountinfo: mountinfoNone, wantErr: true},
		{name: "escaped", mountinfo: mountinfoEscaped,
			want: cgroupFS{unified: "/run/my cgroups/uni fied", unifiedRoot: "/e f", named: "/run/my cgroups/systemd", namedRoot: "/c d",
				v1: []string{"memory"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := testMounts(t, tt.mountinfo).fs()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, got %+v", fs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fs
			got.v2 = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			fs.v2 = tt.v2
			if u := fs.unenforced(tt.limits); !reflect.DeepEqual(u, tt.unenf) {
				t.Errorf("unenforced(%+v) = %v, want %v", tt.limits, u, tt.unenf)
			}
		})
	}
}

func TestV1Mounts(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mountinfo string
		want      map[string]v1Mount
	}{
		{name: "hybrid", mountinfo: mountinfoHybrid, want: map[string]v1Mount{
			"rw":           {mount: "/sys/fs/cgroup/cpu", root: "/"},
			"cpu":          {mount: "/sys/fs/cgroup/cpu", root: "/"},
			"memory":       {mount: "/sys/fs/cgroup/memory", root: "/"},
			"pids":         {mount: "/sys/fs/cgroup/pids", root: "/"},
			"xattr":        {mount: "/sys/fs/cgroup/systemd", root: "/"},
			"name=systemd": {mount: "/sys/fs/cgroup/systemd", root: "/"},
		}},
		{name: "unified", mountinfo: mountinfoUnified, want: map[string]v1Mount{}},
		{name: "none", mountinfo: mountinfoNone, want: map[string]v1Mount{}},
		{name: "escaped", mountinfo: mountinfoEscaped, want: map[string]v1Mount{
			"rw":           {mount: "/run/my cgroups/memory", root: `/a\b`},
			"memory":       {mount: "/run/my cgroups/memory", root: `/a\b`},
			"xattr":        {mount: "/run/my cgroups/systemd", root: "/c d"},
			"name=systemd": {mount: "/run/my cgroups/systemd", root: "/c d"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := testMounts(t, tt.mountinfo).v1()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCgroup2MountIn(t *testing.T) {
	for _, tt := range []struct {
		name, mountinfo, want string
	}{
		{name: "hybrid", mountinfo: mountinfoHybrid, want: "/sys/fs/cgroup/unified"},
		{name: "unified", mountinfo: mountinfoUnified, want: "/sys/fs/cgroup"},
		{name: "none", mountinfo: mountinfoNone},
		{name: "escaped", mountinfo: mountinfoEscaped, want: "/run/my cgroups/uni fied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := testMounts(t, tt.mountinfo).cgroup2()
			if tt.want == "" {
				if err == nil {
					t.Fatalf("no error, got %q", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// testMounts parses the mount table text.
func testMounts(t *testing.T, text string) cgroupMounts {
	t.Helper()
	ms, err := parseMounts(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
