package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/cgroup"
)

// requireCgroup1 skips, saying why, unless this is a host where the
// sandbox's cgroup must come from the v1 hierarchies: root, no systemd, a
// cgroup v2 tree that cannot enforce the limits, v1 memory, pids and cpu
// hierarchies that root can write.
func requireCgroup1(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("host lacks: cgroup v1 placement is for root callers")
	}
	if Detect().Cgroups == CgroupSystemd {
		t.Skip("host lacks: systemd is the service manager here: the sandbox gets a transient scope (test/sandbox)")
	}
	l := cgroup.Limits{MemoryMax: 1 << 30, TasksMax: 64, CPUQuota: 50}
	if p, err := cgroup.NewCgroupPlacer("soda-sandbox", l, sandboxParent(runtime.NumCPU())); err == nil && len(p.Unenforced()) == 0 {
		t.Skip("host lacks: the cgroup v2 tree here enforces every limit: the v1 hierarchies are not used")
	}
	p, err := cgroup.NewCgroup1Placer("soda-sandbox", l, sandboxParent(runtime.NumCPU()))
	if err != nil {
		t.Skipf("host lacks: no usable cgroup v1 hierarchies here: %v", err)
	}
	if m := p.Unenforced(); len(m) > 0 {
		t.Skipf("host lacks: the cgroup v1 hierarchies here cannot enforce %v", m)
	}
}

// strictCgroup runs with the cgroup layer required, as sodactl does
// without --allow-degraded.
func strictCgroup(s *Spec) { s.AllowDegraded = nil }

// TestCgroupV1MemoryHogIsKilled: a command that allocates past MemoryMax
// is OOM-killed (137) inside its v1 memory cgroup; the same command under
// a larger limit (the control) survives.
func TestCgroupV1MemoryHogIsKilled(t *testing.T) {
	requireCgroup1(t)
	hog := `$x = "x" x (256*1024*1024); print "survived\n"`
	st, out, errOut, err := runSandbox(t, func(s *Spec) { strictCgroup(s); s.Limits.MemoryMax = 2 << 30 }, "/usr/bin/perl", "-e", hog)
	if err != nil || st.Code != 0 || !strings.Contains(out, "survived") {
		t.Fatalf("control (2 GiB limit): %+v %v, out %q, stderr %s", st, err, out, errOut)
	}
	st, out, errOut, err = runSandbox(t, func(s *Spec) { strictCgroup(s); s.Limits.MemoryMax = 64 << 20 }, "/usr/bin/perl", "-e", hog)
	if err != nil {
		t.Fatalf("sandbox: %v (stderr %s)", err, errOut)
	}
	if st.Code != 137 || strings.Contains(out, "survived") {
		t.Errorf("a 256 MiB hog under a 64 MiB limit: status %+v, out %q; want 137 (OOM-killed)", st, out)
	}
}

// TestCgroupV1ForkBombStops: forks fail at TasksMax (pids.max), counting
// the sandbox's init threads, and the sandbox still ends.
func TestCgroupV1ForkBombStops(t *testing.T) {
	requireCgroup1(t)
	const max = 40
	bomb := `$n=0; for (1..500) { $p=fork(); if (!defined $p) { print "fork failed: $!\n"; last } if ($p==0) { sleep 60; exit 0 } $n++ } print "forked $n\n"`
	st, out, errOut, err := runSandbox(t, func(s *Spec) { strictCgroup(s); s.Limits.TasksMax = max }, "/usr/bin/perl", "-e", bomb)
	if err != nil || st.Code != 0 {
		t.Fatalf("sandbox: %+v %v (stderr %s)", st, err, errOut)
	}
	var n int
	if _, err := fmt.Sscanf(out[strings.Index(out, "forked "):], "forked %d", &n); err != nil || !strings.Contains(out, "fork failed") {
		t.Fatalf("the bomb was not stopped: %q", out)
	}
	t.Logf("forked %d children under TasksMax=%d", n, max)
	if n >= max || n < max/2 {
		t.Errorf("forked %d children under TasksMax=%d; want fewer than %d and not far fewer", n, max, max)
	}
}

// TestCgroupV1CPUQuota: a CPU burner under CPUQuota=20% gets about a fifth
// of a CPU; without a quota (the control) it gets most of one.
func TestCgroupV1CPUQuota(t *testing.T) {
	requireCgroup1(t)
	burn := `use Time::HiRes qw(time); my $end = time + 1.5; 1 while time < $end; my @t = times; printf "%.3f\n", $t[0] + $t[1]`
	cpu := func(quota uint64) float64 {
		st, out, errOut, err := runSandbox(t, func(s *Spec) { strictCgroup(s); s.Limits.CPUPercent = quota }, "/usr/bin/perl", "-e", burn)
		if err != nil || st.Code != 0 {
			t.Fatalf("sandbox: %+v %v (stderr %s)", st, err, errOut)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			t.Fatalf("burner output %q: %v", out, err)
		}
		return f
	}
	free := cpu(0)
	if free < 0.75 {
		t.Skipf("host lacks: the host is too busy to tell (the burner got %.2fs of CPU in 1.5s without a quota)", free)
	}
	got := cpu(20)
	t.Logf("CPU in 1.5 s: %.3fs without a quota, %.3fs under CPUQuota=20%%", free, got)
	if got > 0.3*1.5 || got < 0.1*1.5 {
		t.Errorf("under CPUQuota=20%% the burner got %.3fs of CPU in 1.5s, want about 0.3s", got)
	}
}

// TestCgroupV1KilledAsWholeNothingLeft: what the command leaves running,
// even in a new session, is killed at the end, and the sandbox's
// directories in every v1 hierarchy and the v2 tree are gone.
func TestCgroupV1KilledAsWholeNothingLeft(t *testing.T) {
	requireCgroup1(t)
	const id = "sbx-v1left0000"
	st, _, errOut, err := runSandbox(t, func(s *Spec) { strictCgroup(s); s.ID = id },
		"/bin/sh", "-c", "setsid sleep 987.125 & sleep 987.250 & echo started")
	if err != nil || st.Code != 0 {
		t.Fatalf("sandbox: %+v %v (stderr %s)", st, err, errOut)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		// Only this test's own two durations: other tests' sleepers
		// (running at the same time) are not this sandbox's.
		if err == nil && (strings.Contains(string(b), "987.125") || strings.Contains(string(b), "987.250")) {
			t.Errorf("pid %s (%q) outlived its sandbox", e.Name(), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/soda-sandbox-" + id)
	more, _ := filepath.Glob("/sys/fs/cgroup/*/*/*/soda-sandbox-" + id)
	if l := append(left, more...); len(l) > 0 {
		t.Errorf("cgroup directories left: %v", l)
	}
}
