package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestSodadHostLoad is issue 23's "a sandbox must leave the host
// responsive" for a sandbox of sodad's, installed as the package does in a
// systemd box: a fork bomb, then 8 busy loops (testkit.AttackScript), in
// sodactl run --profile (through sodad, as an ordinary user), while
// testkit.MeasureHost times true, python3 and ps -e on the host, outside
// the box, against baselines before and after (testkit.Judge).
//
// Twice: with --cgroup hybrid, where the box's systemd enforces the
// limits through this host's v1 controllers, and with --cgroup v2, whose
// cgroup2 has no controller on this host (systemd accepts CPUQuota= and
// CPUWeight= there and nothing enforces them). Each run first checks that
// the box's cgroups have the cpu and pids controllers, and skips, saying
// so, where they do not: it never passes without measuring. It also checks
// the quota and weight systemd gave the sandbox's scope (the host's CPUs
// but one; a service's weight) and that the sandbox used at most its
// default quota.
//
// Measured on the 2-CPU hybrid test VM (baselines: true p95 4-5 ms,
// python3 median 17-19 ms, ps -e max 25-34 ms):
//
//	            before (slice and scope shares 1024,   after (shares 204, quota 100 %, (*)
//	            quota 200 %, no RLIMIT_NPROC)          RLIMIT_NPROC = TasksMax)
//	forkbomb    ps -e killed at 5 s (2 of 2 runs),     ps -e median 120 ms, max 234 ms;
//	            true and python3 once killed at 5 s;   true p95 12 ms; python3 median 24 ms;
//	            1.38 CPUs used (of 2)                  0.90 CPUs used
//	cpuburn     ps -e max 87 ms; 1.13 CPUs used        ps -e max 89 ms; 0.96 CPUs used
//
// (*) measured with a weight of 20 (shares 204), first chosen; the default
// is a service's weight now, since 20 made ps -e wait 24-42 s with the
// host's own CPUs busy (docs/sandbox.md, "Host cost").
func TestSodadHostLoad(t *testing.T) {
	testkit.RequireHostLoad(t)
	if os.Getenv("SODA_E2E") != "1" {
		t.Skip("the sodad host-load test runs with SODA_E2E=1 (make test-e2e): it boots a systemd box")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root and test/box/sdbox check: not running as root (uid %d)", os.Geteuid())
	}
	repo := repoRoot(t)
	sdbox := filepath.Join(repo, "test", "box", "sdbox")
	art := t.TempDir()
	// Static, with the lean sodactl and sodactl-full, as the Makefile and
	// the packages build them.
	if err := testkit.Build(art, "cmd/sodad", "cmd/soda-sandbox-init", "cmd/sodactl"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"polkit/io.github.soda_project.soda1.policy", "polkit/50-soda-example.rules",
		"packaging/dbus/io.github.soda_project.Soda1.conf", "packaging/dbus/io.github.soda_project.Soda1.service",
		"units/sodad.service", "units/soda.slice", "units/soda-sandbox.slice"} {
		copyFile(t, filepath.Join(repo, f), filepath.Join(art, filepath.Base(f)))
	}
	if err := os.Chmod(art, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"hybrid", "v2"} {
		t.Run(mode, func(t *testing.T) {
			if out, err := exec.Command(sdbox, "check", "--cgroup", mode).CombinedOutput(); err != nil {
				t.Skipf("host lacks: test/box/sdbox check --cgroup %s: %s", mode, strings.TrimSpace(string(out)))
			}
			// The attack's directory, on the host's disk (the box's /tmp
			// and the sandbox's are their own), granted to the sandbox.
			dir, err := os.MkdirTemp("/var/lib", "soda-e2e-hostload-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			b := bootBox(t, sdbox, "--cgroup", mode, "--bind-ro", art, "--bind", dir, "--timeout", "60")
			b.onFailJournal(t)

			// Control: the box's cgroups can enforce a CPU quota, a weight
			// and a task limit.
			ctl := b.sh(`if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo v2 $(cat /sys/fs/cgroup/cgroup.controllers);
else echo v1 $(test -f /sys/fs/cgroup/cpu/cpu.shares && echo cpu) $(test -d /sys/fs/cgroup/pids && echo pids); fi`)
			have := strings.Fields(must(t, ctl))
			for _, c := range []string{"cpu", "pids"} {
				if !slices.Contains(have, c) {
					t.Skipf("host lacks: the box's cgroups (%s) have no %s controller: systemd would accept the sandbox's CPUQuota=, CPUWeight= and TasksMax= and nothing would enforce them (on this host cgroup2 has no controllers; a unified host that delegates cpu and pids to the box's cgroup runs this)", strings.Join(have, " "), c)
				}
			}

			out := must(t, b.sh(fmt.Sprintf(`set -e
A=%[1]s
install -m 0755 $A/sodad /usr/bin/sodad
install -m 0755 $A/sodactl /usr/bin/sodactl
install -D -m 0755 $A/sodactl-full /usr/libexec/soda/sodactl-full
install -D -m 0755 $A/soda-sandbox-init /usr/libexec/soda/soda-sandbox-init
install -m 0644 $A/sodad.service $A/soda.slice $A/soda-sandbox.slice /usr/lib/systemd/system/
install -m 0644 $A/io.github.soda_project.soda1.policy /usr/share/polkit-1/actions/
install -m 0644 $A/io.github.soda_project.Soda1.conf /usr/share/dbus-1/system.d/
install -D -m 0644 $A/io.github.soda_project.Soda1.service /usr/share/dbus-1/system-services/io.github.soda_project.Soda1.service
install -D -m 0644 $A/50-soda-example.rules /etc/polkit-1/rules.d/50-soda.rules
systemctl daemon-reload
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
systemctl restart polkit.service
groupadd -r soda-users
useradd -M -U -G soda-users -s /bin/sh alice
mkdir -p /etc/soda/sandbox
printf '[Profile]\nDescription=host load\nUsers=alice\n[Grants]\nNoNetwork=yes\n[Paths]\nReadWritePaths=%[2]s\n' > /etc/soda/sandbox/hl.conf
id -u alice
`, art, dir)))
			uid, err := strconv.Atoi(strings.TrimSpace(lastLine(out)))
			if err != nil {
				t.Fatalf("alice's uid: %v", err)
			}
			for _, attack := range []string{"forkbomb", "cpuburn"} {
				t.Run(attack, func(t *testing.T) {
					sub := filepath.Join(dir, attack)
					if err := os.Mkdir(sub, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Chown(sub, uid, uid); err != nil {
						t.Fatal(err)
					}
					sodadHostLoad(t, b, sub, attack)
				})
			}
		})
	}
}

// sodadHostLoad runs attack through sodad as alice in box b, with DIR dir,
// and checks that the host stayed responsive meanwhile.
func sodadHostLoad(t *testing.T, b *box, dir, attack string) {
	ctx := context.Background()
	before, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 3 * time.Second})
	if err != nil {
		t.Fatalf("baseline: %v", err)
	}
	cmd := exec.Command(b.sdbox, "exec", b.dir, "--", "setpriv", "--reuid=alice", "--regid=alice", "--init-groups",
		"/usr/bin/sodactl", "run", "--profile", "hl", "--rw", dir, "--timeout", "120s", "--", "python3", "-c", testkit.AttackScript, dir, attack)
	cmd.Dir = "/"
	a, err := testkit.StartAttack(cmd, dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let it ramp up
	// What systemd made of the defaults: the slice's and the scope's CPU
	// weight (cgroup v1 cpu.shares here, cgroup v2 cpu.weight) and quota.
	weights := b.sh(`for f in /sys/fs/cgroup/cpu/soda.slice/soda-sandbox.slice/cpu.shares /sys/fs/cgroup/cpu/soda.slice/soda-sandbox.slice/soda-sandbox-*.scope/cpu.shares \
  /sys/fs/cgroup/cpu/soda.slice/soda-sandbox.slice/soda-sandbox-*.scope/cpu.cfs_quota_us \
  /sys/fs/cgroup/soda.slice/soda-sandbox.slice/cpu.weight /sys/fs/cgroup/soda.slice/soda-sandbox.slice/soda-sandbox-*.scope/cpu.weight \
  /sys/fs/cgroup/soda.slice/soda-sandbox.slice/soda-sandbox-*.scope/cpu.max; do [ -f "$f" ] && echo "$f=$(cat "$f")"; done; true`).stdout
	during, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 8 * time.Second})
	use, stopErr := a.Stop()
	if err != nil {
		t.Fatalf("measure during the attack: %v", err)
	}
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	after, err := testkit.MeasureHost(ctx, testkit.ProbeOptions{Duration: 2 * time.Second})
	if err != nil {
		t.Fatalf("measure after the attack: %v", err)
	}
	t.Logf("before: %s", before)
	t.Logf("during %s: %s", attack, during)
	t.Logf("after: %s", after)
	t.Logf("the sandbox used %.2f CPU-seconds in %.1f s, %d processes at the end; its cgroups:\n%s", use.CPU, use.Wall, use.Processes, weights)
	// The scope's quota: the host's CPUs but one (cfs_quota_us on v1,
	// cpu.max on v2), and the weight a service's (cpu.shares 1024 on v1,
	// cpu.weight 100 on v2): a lower one starves a fork bomb's copies
	// while they hold the locks ps reads through (docs/sandbox.md).
	quota := fmt.Sprint(max(1, runtime.NumCPU()-1) * 100000)
	if !strings.Contains(weights, "cpu.cfs_quota_us="+quota) && !strings.Contains(weights, "cpu.max="+quota+" ") {
		t.Errorf("the sandbox's scope has no CPU quota of the host's CPUs but one (%s):\n%s", quota, weights)
	}
	if strings.Contains(weights, "cpu.shares=204") || strings.Contains(weights, "cpu.weight=20\n") {
		t.Errorf("a CPU weight of 20 (cpu.shares 204): the default is a service's:\n%s", weights)
	}
	verdict := testkit.Judge(before, during, after, testkit.DefaultBounds())
	if errors.Is(verdict, testkit.ErrBusyHost) {
		t.Skipf("host lacks: %v", verdict)
	}
	if err := use.Check(attack, 1024); err != nil {
		t.Fatalf("control: %v\n%s", err, a.Output())
	}
	if quota := float64(max(1, runtime.NumCPU()-1)); use.CPUs() > quota+0.05 {
		t.Errorf("the sandbox used %.2f CPUs, more than its default quota of %.0f (the host's CPUs but one)", use.CPUs(), quota)
	}
	if verdict != nil {
		t.Errorf("%v", verdict)
	}
}
