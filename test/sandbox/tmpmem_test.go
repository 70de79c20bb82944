package sandboxtest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestPrivateTmpMemory is issue 23's "RAM outside the quota": what a
// sandbox can write outside its grants is RAM-backed tmpfs, which must
// count against limits an operator sets.
//
//   - /tmp, /var/tmp and /dev/shm are one tmpfs of --tmp-size: writing one
//     fills the others (before: three of 1G, 1G and 257M);
//   - by default /tmp and the home are 512M each: 1G in all;
//   - the pages written there are charged to the sandbox's memory cgroup:
//     its usage grows by what was written, and a write past --memory is
//     OOM-killed, although --tmp-size would take it (control: the same
//     write under a larger --memory succeeds);
//   - System V IPC in the sandbox's IPC namespace is bounded: shared
//     memory to --tmp-size and removed with its last user (before: the
//     kernel's 16 EiB, kept until the sandbox ends), and POSIX queues by
//     RLIMIT_MSGQUEUE.
func TestPrivateTmpMemory(t *testing.T) {
	e := requireEnv(t)
	run := func(t *testing.T, args []string, script string) result {
		t.Helper()
		return e.sodactl(execOpts{}, append(append([]string{"--direct", "--no-network"}, args...), "--", "sh", "-c", script)...)
	}
	lines := func(out string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}

	t.Run("one-tmpfs", func(t *testing.T) {
		script := strings.Join([]string{
			"echo devs=$(stat -c %d /tmp /var/tmp /dev/shm | sort -u | wc -l)",
			"echo home-dev-differs=$(test $(stat -c %d /tmp) != $(stat -c %d $HOME) && echo yes)",
			"echo modes=$(stat -c %a /tmp /var/tmp /dev/shm | sort -u | paste -sd, -)",
			// Mount options of each (field 6 of mountinfo).
			"for m in /tmp /var/tmp /dev/shm; do echo opts$m=$(awk -v m=$m '$5 == m {print $6}' /proc/self/mountinfo | tail -1); done",
			"echo size=$(df -B1 --output=size /tmp | tail -1 | tr -d ' ')",
			"dd if=/dev/zero of=/tmp/a bs=1M count=40 status=none && echo tmp-write=ok",
			"dd if=/dev/zero of=/var/tmp/b bs=1M count=40 status=none 2>/dev/null && echo vartmp-write=ok || echo vartmp-write=refused",
			"echo shm-avail=$(df -B1 --output=avail /dev/shm | tail -1 | tr -d ' ')",
		}, "\n")
		r := run(t, []string{"--tmp-size", "64M"}, script)
		if r.err != nil {
			t.Fatalf("%s", r)
		}
		got := lines(r.stdout)
		want := map[string]string{"devs": "1", "home-dev-differs": "yes", "modes": "1777", "size": strconv.Itoa(64 << 20),
			"tmp-write": "ok", "vartmp-write": "refused"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		for _, m := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
			opts := got["opts"+m]
			for _, o := range []string{"nosuid", "nodev", "noexec"} {
				if !strings.Contains(","+opts+",", ","+o+",") {
					t.Errorf("%s mounted %q, want %s", m, opts, o)
				}
			}
		}
		if avail, _ := strconv.Atoi(got["shm-avail"]); avail > 24<<20 {
			t.Errorf("/dev/shm has %d bytes free after 40M+ were written to /tmp and /var/tmp of a 64M tmpfs: not the same tmpfs", avail)
		}
		if t.Failed() {
			t.Logf("%s", r)
		}
	})

	t.Run("defaults", func(t *testing.T) {
		r := run(t, nil, "echo tmp=$(df -B1 --output=size /tmp | tail -1 | tr -d ' '); echo home=$(df -B1 --output=size $HOME | tail -1 | tr -d ' ')")
		if r.err != nil {
			t.Fatalf("%s", r)
		}
		got := lines(r.stdout)
		for _, k := range []string{"tmp", "home"} {
			if got[k] != strconv.Itoa(512<<20) {
				t.Errorf("default %s size %q, want 512M (/tmp and the home pin at most 1G together)\n%s", k, got[k], r)
			}
		}
	})

	t.Run("charged-to-memory", func(t *testing.T) {
		usage := "cat /sys/fs/cgroup/memory/memory.usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.current"
		r := run(t, []string{"--memory", "512M"}, "echo before=$("+usage+"); dd if=/dev/zero of=/tmp/f bs=1M count=48 status=none; echo after=$("+usage+")")
		if r.err != nil {
			t.Fatalf("%s", r)
		}
		got := lines(r.stdout)
		before, err1 := strconv.ParseInt(got["before"], 10, 64)
		after, err2 := strconv.ParseInt(got["after"], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("no memory usage readable in the sandbox's cgroup (a host without a memory controller?):\n%s", r)
		}
		t.Logf("the sandbox cgroup's memory: %d MiB before, %d MiB after 48 MiB written to /tmp (the writer has exited)", before>>20, after>>20)
		if after-before < 44<<20 {
			t.Errorf("48 MiB written to /tmp raised the sandbox's memory usage by %d MiB only: the tmpfs pages are not charged to it", (after-before)>>20)
		}
		// Past the memory limit: OOM-killed, although the tmpfs has room.
		write := "dd if=/dev/zero of=/tmp/f bs=1M count=200 status=none && echo written"
		if r := run(t, []string{"--memory", "512M", "--tmp-size", "256M"}, write); r.err != nil || !strings.Contains(r.stdout, "written") {
			t.Fatalf("control: 200 MiB into a 256M /tmp under --memory 512M failed:\n%s", r)
		}
		r = run(t, []string{"--memory", "64M", "--tmp-size", "256M"}, write)
		if r.code != 128+9 || strings.Contains(r.stdout, "written") {
			t.Errorf("200 MiB into /tmp under --memory 64M: exit %d, want 137 (the memory limit's OOM kill)\n%s", r.code, r)
		}
	})

	t.Run("sysv-ipc", func(t *testing.T) {
		const tmp = 64 << 20
		script := strings.Join([]string{
			"for k in shmmax shmall shm_rmid_forced msgmni; do echo $k=$(cat /proc/sys/kernel/$k); done",
			"echo page=$(getconf PAGESIZE)",
			"echo sem=$(cat /proc/sys/kernel/sem | tr -s '\\t ' ' ')",
			// A segment nobody attached is gone once ipcmk, its maker, exits.
			"ipcmk -M 1048576 >/dev/null && echo segments=$(ipcs -m | grep -c '^0x')",
			fmt.Sprintf("ipcmk -M %d >/dev/null 2>&1 && echo big=made || echo big=refused", tmp+4096),
			"echo msgqueue=$(awk '/^Max msgqueue size/ {print $4}' /proc/self/limits)",
		}, "\n")
		r := run(t, []string{"--tmp-size", strconv.Itoa(tmp)}, script)
		if r.err != nil {
			t.Fatalf("%s", r)
		}
		got := lines(r.stdout)
		page, err := strconv.Atoi(got["page"])
		if err != nil || page <= 0 {
			t.Fatalf("page size %q:\n%s", got["page"], r)
		}
		want := map[string]string{"shmmax": strconv.Itoa(tmp), "shmall": strconv.Itoa(tmp / page), "shm_rmid_forced": "1", "msgmni": "32",
			"sem": "250 32000 32 128", "segments": "0", "big": "refused", "msgqueue": "819200"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		if t.Failed() {
			t.Logf("%s", r)
		}
	})
}
