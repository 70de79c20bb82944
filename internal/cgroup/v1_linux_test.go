package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// newTestCgroup1Placer returns a cgroup1 placer with every limit, or skips
// saying why this host has none.
func newTestCgroup1Placer(t *testing.T, prefix string) *cgroup1Placer {
	t.Helper()
	p, err := newCgroup1Placer(prefix, Limits{MemoryMax: 256 << 20, TasksMax: 50, CPUQuota: 30, CPUWeight: 100}, Parent{})
	if err != nil {
		t.Skipf("host lacks: no writable cgroup v1 hierarchies here: %v", err)
	}
	if m := p.Unenforced(); len(m) > 0 {
		t.Skipf("host lacks: the cgroup v1 hierarchies here lack %v", m)
	}
	return p
}

// TestCgroup1GroupLimitsKillRelease: with and without a v2 directory, a
// child placed after it started shows the group's v1 paths in
// /proc/PID/cgroup, its directories hold the limits, Kill ends it and
// what it left in a new session, and Release removes every directory.
func TestCgroup1GroupLimitsKillRelease(t *testing.T) {
	for _, withV2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", withV2), func(t *testing.T) {
			p := newTestCgroup1Placer(t, "soda-c1test")
			if !withV2 {
				p.v2 = nil
			} else if p.v2 == nil {
				t.Skip("host lacks: no writable cgroup v2 tree here")
			}
			g, err := p.NewGroup(fmt.Sprintf("g%d", os.Getpid()))
			if err != nil {
				t.Fatal(err)
			}
			g1 := g.(*cgroup1Group)
			<-g1.made // the v1 directories are made while the caller starts the process
			for file, want := range map[string]string{
				"memory/memory.limit_in_bytes":       strconv.Itoa(256 << 20),
				"memory/memory.memsw.limit_in_bytes": strconv.Itoa(256 << 20),
				"pids/pids.max":                      "50",
				"cpu/cpu.cfs_quota_us":               "30000",
				"cpu/cpu.cfs_period_us":              "100000",
				"cpu/cpu.shares":                     "1024",
			} {
				c, name, _ := strings.Cut(file, "/")
				if c == "memory" && name == "memory.memsw.limit_in_bytes" && !p.memsw {
					continue
				}
				path := filepath.Join(p.mounts[cgroup1.Name(c)], p.base[cgroup1.Name(c)], g1.name, name)
				b, err := os.ReadFile(path)
				if err != nil || strings.TrimSpace(string(b)) != want {
					t.Errorf("%s = %q (%v), want %s", path, b, err, want)
				}
			}
			cmd := exec.Command("/bin/sh", "-c", "read x; setsid sleep 991.5 & exec sleep 991.25")
			cmd.SysProcAttr = &syscall.SysProcAttr{}
			w, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Prepare(cmd); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			if err := g.Started(context.Background(), cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
			for c, path := range g1.V1Paths() {
				if !strings.Contains(string(b), ":"+c+":"+path+"\n") && !strings.Contains(string(b), ","+c+":"+path+"\n") && !strings.Contains(string(b), ":"+c+",") {
					t.Errorf("pid %d not in %s %s:\n%s", cmd.Process.Pid, c, path, b)
				}
			}
			w.Write([]byte("go\n"))
			deadline := time.Now().Add(5 * time.Second)
			for g.Count() < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if n := g.Count(); n != 2 {
				t.Fatalf("group holds %d processes, want 2", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := g.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if n := g.Count(); n != 0 {
				t.Errorf("%d processes left after Kill", n)
			}
			if err := g.Release(); err != nil {
				t.Fatal(err)
			}
			for _, d := range g1.dirs {
				if _, err := os.Stat(d); err == nil {
					t.Errorf("%s left after Release", d)
				}
			}
			if withV2 {
				if _, err := os.Stat(g1.v2.path); err == nil {
					t.Errorf("%s left after Release", g1.v2.path)
				}
			}
		})
	}
}

// TestCgroup1Sweep: in each v1 hierarchy, only the empty leftovers of the
// prefix that no owner lock marks and older than the minimum age go.
func TestCgroup1Sweep(t *testing.T) {
	p := newTestCgroup1Placer(t, "soda-c1sweep")
	var stale, keep []string
	for c, mount := range p.mounts {
		dir := filepath.Join(mount, p.base[c])
		for name, age := range map[string]time.Duration{"soda-c1sweep-dead": time.Hour, "soda-c1sweep-new": 0, "soda-c1other-dead": time.Hour} {
			path := filepath.Join(dir, name)
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(path) })
			old := time.Now().Add(-age)
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
			if name == "soda-c1sweep-dead" {
				stale = append(stale, path)
			} else {
				keep = append(keep, path)
			}
		}
	}
	removed, err := SweepGroups(t.Context(), testLogger(t), "soda-c1sweep", "", 10*time.Second)
	if err != nil {
		t.Fatalf("SweepGroups: %v", err)
	}
	if len(removed) != len(stale) {
		t.Errorf("removed %v, want %v", removed, stale)
	}
	for _, s := range stale {
		if _, err := os.Stat(s); err == nil {
			t.Errorf("%s was not removed", s)
		}
	}
	for _, k := range keep {
		if _, err := os.Stat(k); err != nil {
			t.Errorf("%s was removed: %v", k, err)
		}
	}
}
