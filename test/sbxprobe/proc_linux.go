package main

// Rows 2, 6, 7 and 8: other processes (a host process, the sandbox's pid
// 1), what /proc and /sys give away, the cgroup, and signals.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// processDenials are the errors meaning "may not access that process".
var processDenials = append([]unix.Errno{unix.ESRCH}, denials...)

// hostPIDProbes is row 2: a host process must be out of reach.
func (b *battery) hostPIDProbes() []probe {
	pid := b.cfg.hostPID
	if pid <= 0 {
		return []probe{{row: 2, name: "host-pid", skip: "no --host-pid given"}}
	}
	ps := []probe{{row: 2, name: "host-pid kill0", run: func() Result {
		return attempt(fmt.Sprintf("kill(%d, 0)", pid), unix.Kill(pid, 0))
	}}}
	return append(ps, b.pidAccessProbes(2, "host-pid", pid)...)
}

// pid1Probes is row 6: tracing ourselves and reaching the sandbox's init.
func (b *battery) pid1Probes() []probe {
	ps := []probe{{row: 6, name: "ptrace traceme", run: func() Result {
		return runChild(b.inner(), "traceme").result("ptrace(PTRACE_TRACEME)")
	}}}
	return append(ps, b.pidAccessProbes(6, "pid1", 1)...)
}

// pidAccessProbes are the ways into another process: tracing it, reading
// its memory and environment, and stealing its descriptors.
func (b *battery) pidAccessProbes(row int, prefix string, pid int) []probe {
	mem := fmt.Sprintf("/proc/%d/mem", pid)
	env := fmt.Sprintf("/proc/%d/environ", pid)
	self := pid == os.Getpid()
	return []probe{
		{row: row, name: prefix + " ptrace", run: func() Result {
			// PTRACE_SEIZE passes the same checks as PTRACE_ATTACH but does
			// not stop the tracee; the tracer child exits at once, which
			// detaches it.
			return runChild(b.inner(), "ptrace-seize", strconv.Itoa(pid)).result(fmt.Sprintf("ptrace(PTRACE_SEIZE, %d)", pid))
		}},
		{row: row, name: prefix + " process_vm_readv", run: func() Result { return vmRead(pid) }},
		{row: row, name: prefix + " proc-mem", run: func() Result {
			if self {
				return isSelf(pid)
			}
			f, err := os.Open(mem)
			if err != nil {
				return attempt("open "+mem, err)
			}
			defer f.Close()
			addr, _ := mappingAddr(pid)
			buf := make([]byte, 8)
			n, rerr := f.ReadAt(buf, int64(addr))
			return Result{Detail: fmt.Sprintf("open %s: succeeded; read %d bytes at %#x (err %v)", mem, n, addr, rerr)}
		}},
		{row: row, name: prefix + " proc-environ", run: func() Result {
			if self {
				return isSelf(pid)
			}
			data, err := os.ReadFile(env)
			if err != nil {
				return attempt("read "+env, err)
			}
			names := envNames(strings.Split(string(data), "\x00"))
			if len(data) == 0 {
				return Result{Blocked: true, Detail: "read " + env + ": empty"}
			}
			return Result{Detail: fmt.Sprintf("read %s: %d bytes, %d variables (names listed)", env, len(data), len(names)), List: names}
		}},
		{row: row, name: prefix + " pidfd_getfd", run: func() Result {
			pfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				return attempt(fmt.Sprintf("pidfd_open(%d)", pid), err)
			}
			defer unix.Close(pfd)
			fd, err := unix.PidfdGetfd(pfd, 0, 0)
			if err != nil {
				return attempt(fmt.Sprintf("pidfd_open(%d): ok; pidfd_getfd(fd 0)", pid), err)
			}
			target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
			unix.Close(fd)
			return Result{Detail: fmt.Sprintf("pidfd_getfd(%d, fd 0): got a copy of %s", pid, target)}
		}},
	}
}

// isSelf reports a probe of another process's files that would only read
// our own: no escape. (The system-call probes still run against ourselves,
// since seccomp must refuse them whatever the target.)
func isSelf(pid int) Result {
	return Result{Blocked: true, Detail: fmt.Sprintf("pid %d is this process: there is nothing outside to reach", pid)}
}

// vmRead reads 8 bytes of pid's memory with process_vm_readv. A fault on
// the address still means the access check passed.
func vmRead(pid int) Result {
	addr, src := mappingAddr(pid)
	buf := make([]byte, 8)
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	what := fmt.Sprintf("process_vm_readv(%d, 8 bytes at %#x from %s)", pid, addr, src)
	if err == nil {
		return Result{Detail: fmt.Sprintf("%s: read %d bytes", what, n)}
	}
	return gated(what, err, processDenials...)
}

// mappingAddr returns the start of pid's first readable mapping, or a
// guess when its maps cannot be read.
func mappingAddr(pid int) (uintptr, string) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 || !strings.HasPrefix(fields[1], "r") {
				continue
			}
			start, _, _ := strings.Cut(fields[0], "-")
			if v, err := strconv.ParseUint(start, 16, 64); err == nil {
				return uintptr(v), "its maps"
			}
		}
	}
	return 0x400000, "a guess"
}

// childTraceme asks to be traced by its parent, then exits (untraced).
func childTraceme([]string) childOut {
	_, _, e := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
	return outOf("ptrace(PTRACE_TRACEME)", sysErr(e))
}

// childPtraceSeize seizes the pid in args[0]; exiting detaches it.
func childPtraceSeize(args []string) childOut {
	if len(args) != 1 {
		return childOut{Detail: "ptrace-seize needs a pid"}
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil {
		return childOut{Detail: "bad pid: " + err.Error()}
	}
	runtime.LockOSThread()
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	o := outOf(fmt.Sprintf("ptrace(PTRACE_SEIZE, %d)", pid), sysErr(e))
	if o.OK {
		o.Detail += ": the process could be traced (released when the probe exits)"
	}
	return o
}

// childCgroupMove writes its own pid into args[0]/cgroup.procs.
func childCgroupMove(args []string) childOut {
	if len(args) != 1 {
		return childOut{Detail: "cgroup-move needs a directory"}
	}
	p := filepath.Join(args[0], "cgroup.procs")
	err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return outOf("write own pid to "+p, err)
}

// readTrim reads a small file and trims white space.
func readTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// procProbes is row 7: what /proc and /sys reveal or let us change.
func (b *battery) procProbes() []probe {
	ps := []probe{
		{row: 7, name: "proc-pids", run: procPids},
		{row: 7, name: "proc-keys", run: func() Result {
			data, err := readTrim("/proc/keys")
			if err != nil {
				return attempt("read /proc/keys", err)
			}
			if data == "" {
				return Result{Blocked: true, Detail: "/proc/keys is empty"}
			}
			return Result{Detail: fmt.Sprintf("/proc/keys lists %d keys", len(strings.Split(data, "\n")))}
		}},
		{row: 7, name: "proc-kallsyms", run: func() Result {
			f, err := os.Open("/proc/kallsyms")
			if err != nil {
				return attempt("open /proc/kallsyms", err)
			}
			defer f.Close()
			line, err := bufio.NewReader(f).ReadString('\n')
			if err != nil {
				return attempt("read /proc/kallsyms", err)
			}
			addr, _, _ := strings.Cut(line, " ")
			if strings.Trim(addr, "0") == "" {
				return Result{Blocked: true, Detail: "/proc/kallsyms hides addresses: " + strings.TrimSpace(line)}
			}
			return Result{Detail: "/proc/kallsyms shows kernel addresses: " + strings.TrimSpace(line)}
		}},
		{row: 7, name: "proc-mountinfo", info: true, run: mountinfoProbe},
		{row: 7, name: "hostname", info: true, run: func() Result {
			proc, err := readTrim("/proc/sys/kernel/hostname")
			var u unix.Utsname
			uerr := unix.Uname(&u)
			return Result{Detail: fmt.Sprintf("/proc/sys/kernel/hostname %q (%v), uname nodename %q (%v)",
				proc, err, unix.ByteSliceToString(u.Nodename[:]), uerr)}
		}},
	}
	return append(ps, b.cgroupProbes()...)
}

// procPids counts the processes visible in /proc: blocked when pid 1 is not
// the host's init and fewer than 16 are visible.
func procPids() Result {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return attempt("read /proc", err)
	}
	var list []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, _ := readTrim("/proc/" + e.Name() + "/comm")
		list = append(list, e.Name()+":"+comm)
	}
	init1, _ := readTrim("/proc/1/comm")
	hostInit := init1 == "systemd" || init1 == "init"
	d := fmt.Sprintf("%d processes visible; /proc/1/comm is %q", len(list), init1)
	return Result{Blocked: !hostInit && len(list) < 16, Detail: d, List: list}
}

// mountinfoProbe reports the mount count and mounts of /home or /run.
func mountinfoProbe() Result {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return attempt("read /proc/self/mountinfo", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var hits []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		for _, p := range []string{f[3], f[4]} {
			if pathUnder(p, "/home") || pathUnder(p, "/run") {
				hits = append(hits, "root "+f[3]+" on "+f[4])
				break
			}
		}
	}
	return Result{Detail: fmt.Sprintf("%d mounts; %d mention /home or /run", len(lines), len(hits)), List: hits}
}

// pathUnder reports whether p is dir or below it.
func pathUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// cgroup2Root returns where the cgroup2 hierarchy is mounted, or "".
func cgroup2Root() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	return ""
}

// ownCgroup returns this process's cgroup2 path from /proc/self/cgroup.
func ownCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	return parseCgroup(string(data))
}

// parseCgroup finds the "0::PATH" line of a /proc/PID/cgroup file.
func parseCgroup(data string) (string, error) {
	for _, l := range strings.Split(data, "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup2 entry in /proc/self/cgroup")
}

// cgroupProbes try to raise the limits and to leave the cgroup. Limits are
// "raised" by writing back their current value: the same permission,
// without changing a host that lets it through.
func (b *battery) cgroupProbes() []probe {
	root := cgroup2Root()
	if root == "" {
		return []probe{{row: 7, name: "cgroup-tamper", run: func() Result {
			return Result{Blocked: true, Detail: "no cgroup2 hierarchy is visible"}
		}}}
	}
	files := []string{root + "/pids.max", root + "/memory.max"}
	own, err := ownCgroup()
	dir := root
	if err == nil {
		dir = filepath.Join(root, own)
		for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max", "cgroup.procs"} {
			files = append(files, filepath.Join(dir, f))
		}
	}
	var ps []probe
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			continue
		}
		seen[f] = true
		ps = append(ps, probe{row: 7, name: "cgroup-tamper " + f, run: func() Result { return cgroupTamper(f) }})
	}
	targets := []struct{ name, dir string }{{"root", root}}
	if parent := filepath.Dir(dir); dir != root && parent != root {
		targets = append(targets, struct{ name, dir string }{"parent", parent})
	}
	for _, t := range targets {
		ps = append(ps, probe{row: 7, name: "cgroup-escape " + t.name, run: func() Result {
			return runChild(b.inner(), "cgroup-move", t.dir).result("move to " + t.dir)
		}})
	}
	return ps
}

// cgroupTamper writes a control file's current value (our pid for
// cgroup.procs) back to it: blocked iff that fails.
func cgroupTamper(p string) Result {
	cur, rerr := readTrim(p)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return attempt("open "+p+" for writing", err)
	}
	defer f.Close()
	val := cur
	if filepath.Base(p) == "cgroup.procs" {
		val = strconv.Itoa(os.Getpid())
	} else if rerr != nil {
		return Result{Detail: fmt.Sprintf("open %s for writing: succeeded (not written: %v)", p, rerr)}
	}
	if _, err := f.WriteString(val + "\n"); err != nil {
		return attempt(fmt.Sprintf("write %q to %s", val, p), err)
	}
	return Result{Detail: fmt.Sprintf("wrote %q to %s: the cgroup can be changed", val, p)}
}

// signalProbes is row 8: signal 0 only, so nothing is ever delivered.
func (b *battery) signalProbes() []probe {
	ps := []probe{
		{row: 8, name: "signal kill(-1,0)", run: func() Result {
			return attempt("kill(-1, 0)", unix.Kill(-1, 0))
		}},
		{row: 8, name: "signal kill(1,0)", info: true, run: func() Result {
			return attempt("kill(1, 0)", unix.Kill(1, 0))
		}},
		{row: 8, name: "signal pidfd_send_signal(1,0)", run: func() Result { return pidfdSignal(1) }},
		{row: 8, name: "signal rt_sigqueueinfo(1,0)", run: func() Result { return sigqueue(1) }},
	}
	if pid := b.cfg.hostPID; pid > 0 {
		ps = append(ps,
			probe{row: 8, name: "signal pidfd_send_signal(host-pid,0)", run: func() Result { return pidfdSignal(pid) }},
			probe{row: 8, name: "signal rt_sigqueueinfo(host-pid,0)", run: func() Result { return sigqueue(pid) }},
		)
	}
	return ps
}

// pidfdSignal sends signal 0 to pid through a pidfd.
func pidfdSignal(pid int) Result {
	if pid == os.Getpid() {
		return isSelf(pid)
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return attempt(fmt.Sprintf("pidfd_open(%d)", pid), err)
	}
	defer unix.Close(pfd)
	return attempt(fmt.Sprintf("pidfd_send_signal(pidfd of %d, 0)", pid), unix.PidfdSendSignal(pfd, 0, nil, 0))
}

// sigqueue sends signal 0 to pid with rt_sigqueueinfo (si_code SI_QUEUE).
func sigqueue(pid int) Result {
	if pid == os.Getpid() {
		return isSelf(pid)
	}
	var info [128]byte                                  // siginfo_t
	binary.NativeEndian.PutUint32(info[8:], 0xffffffff) // si_code = SI_QUEUE (-1)
	_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(pid), 0, uintptr(unsafe.Pointer(&info[0])))
	return attempt(fmt.Sprintf("rt_sigqueueinfo(%d, 0)", pid), sysErr(e))
}
