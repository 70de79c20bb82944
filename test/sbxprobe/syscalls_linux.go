package main

// Rows 5 and 9-12: system calls that seccomp must refuse (terminal
// injection, io_uring, privileged kernel interfaces, namespaces and mounts,
// fileless execution). Arguments are chosen so that a call that is NOT
// filtered still does no harm: it either succeeds on something private and
// is undone at once, or fails on its arguments after the permission checks.

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlProbes is row 5. The ioctls go to /dev/null rather than fd 0, so a
// call that is not filtered answers ENOTTY and can never push characters
// into a real terminal; only seccomp answers EPERM there.
func ioctlProbes() []probe {
	type tc struct {
		name string
		cmd  uintptr
		arg  byte
	}
	cases := []tc{
		{"ioctl TIOCSTI", unix.TIOCSTI, 'x'},
		{"ioctl TIOCSTI|1<<32", unix.TIOCSTI | 1<<32, 'x'},
		{"ioctl TIOCLINUX subcode 3", unix.TIOCLINUX, 3},
	}
	var ps []probe
	for _, c := range cases {
		ps = append(ps, probe{row: 5, name: c.name, run: func() Result { return ioctlProbe(c.cmd, c.arg) }})
	}
	ps = append(ps, probe{row: 5, name: "open /dev/tty", info: true, run: func() Result {
		fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return Result{Blocked: true, Errno: errnoName(err), Detail: "open /dev/tty: " + err.Error()}
		}
		unix.Close(fd)
		return Result{Detail: "open /dev/tty: a controlling terminal is reachable"}
	}})
	return ps
}

// ioctlProbe sends cmd with a pointer to arg to /dev/null: blocked iff EPERM.
func ioctlProbe(cmd uintptr, arg byte) Result {
	fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{Errno: errnoName(err), Detail: "open /dev/null: " + err.Error()}
	}
	defer unix.Close(fd)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&arg)))
	what := fmt.Sprintf("ioctl(/dev/null, %#x)", cmd)
	switch e {
	case unix.EPERM:
		return Result{Blocked: true, Errno: "EPERM", Detail: what + ": EPERM: filtered by seccomp"}
	case unix.ENOTTY:
		return Result{Errno: "ENOTTY", Detail: "ENOTTY: not filtered"}
	case 0:
		return Result{Detail: what + ": succeeded: not filtered"}
	}
	return Result{Errno: errnoName(e), Detail: fmt.Sprintf("%s: %v: not filtered", what, e)}
}

// ioUringProbes is row 9: blocked iff ENOSYS or EPERM.
func ioUringProbes() []probe {
	badFD := -1
	return []probe{
		{row: 9, name: "io_uring_setup", run: func() Result {
			var params [120]byte // struct io_uring_params
			fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params)), 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return gated("io_uring_setup(8)", sysErr(e), unix.ENOSYS, unix.EPERM)
		}},
		{row: 9, name: "io_uring_enter", run: func() Result {
			_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(badFD), 0, 0, 0, 0, 0)
			return gated("io_uring_enter(-1)", sysErr(e), unix.ENOSYS, unix.EPERM)
		}},
		{row: 9, name: "io_uring_register", run: func() Result {
			_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(badFD), 0, 0, 0, 0, 0)
			return gated("io_uring_register(-1)", sysErr(e), unix.ENOSYS, unix.EPERM)
		}},
	}
}

// cstr returns a NUL-terminated copy of s for raw system calls.
func cstr(s string) *byte {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Constants not exported by x/sys/unix.
const (
	sysLSMListModules = 461        // lsm_list_modules on x86_64
	bpfProgLoad       = 5          // BPF_PROG_LOAD
	syslogSizeBuffer  = 10         // SYSLOG_ACTION_SIZE_BUFFER
	addrNoRandomize   = 0x0040000  // ADDR_NO_RANDOMIZE
	personalityQuery  = 0xffffffff // personality(): read only
	qSyncAllUser      = 0x80000100 // QCMD(Q_SYNC, USRQUOTA)
	kexecBadFlags     = 40<<16 | 0x8000
	x32SyscallBit     = 0x40000000
	i386Getpid        = 20
	noSuchModule      = "sbxprobe_no_such_module"
	noSuchPath        = "/nonexistent-sbxprobe"
)

// privSyscallProbes is row 10: privileged kernel interfaces and foreign
// system-call ABIs. Rows built with gated() use arguments that fail after
// the permission checks, so only a denial counts as blocked.
func (b *battery) privSyscallProbes() []probe {
	pid := os.Getpid()
	type tc struct {
		name string
		run  func() Result
	}
	cases := []tc{
		{"userfaultfd", func() Result {
			fd, _, e := unix.RawSyscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return attempt("userfaultfd", sysErr(e))
		}},
		{"bpf BPF_PROG_LOAD", func() Result {
			_, _, e := unix.Syscall(unix.SYS_BPF, bpfProgLoad, 0, 0)
			return gated("bpf(BPF_PROG_LOAD, NULL, 0)", sysErr(e))
		}},
		{"perf_event_open", func() Result {
			attr := unix.PerfEventAttr{
				Type:   unix.PERF_TYPE_SOFTWARE,
				Config: unix.PERF_COUNT_SW_CPU_CLOCK,
				Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
			}
			attr.Size = uint32(unsafe.Sizeof(attr))
			fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return attempt("perf_event_open(software cpu-clock, self)", err)
		}},
		{"keyctl KEYCTL_GET_KEYRING_ID", func() Result {
			id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
			r := attempt("keyctl(KEYCTL_GET_KEYRING_ID, session)", err)
			if err == nil {
				r.Detail = fmt.Sprintf("keyctl: session keyring id %d", id)
			}
			return r
		}},
		{"add_key", func() Result {
			id, err := unix.AddKey("user", fmt.Sprintf("sbxprobe-%d", pid), []byte("x"), unix.KEY_SPEC_SESSION_KEYRING)
			if err == nil {
				unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
			}
			return attempt("add_key(user, session keyring)", err)
		}},
		{"request_key", func() Result {
			typ, desc := cstr("user"), cstr(fmt.Sprintf("sbxprobe-none-%d", pid))
			_, _, e := unix.Syscall6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(typ)), uintptr(unsafe.Pointer(desc)), 0, 0, 0, 0)
			return gated("request_key(user, unknown, no callout)", sysErr(e))
		}},
		{"kexec_load", func() Result {
			_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, kexecBadFlags, 0, 0)
			return gated("kexec_load(0 segments, foreign arch + unknown flag)", sysErr(e))
		}},
		{"init_module", func() Result {
			params := cstr("")
			_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, 0, 0, uintptr(unsafe.Pointer(params)))
			return gated("init_module(NULL, 0, \"\")", sysErr(e))
		}},
		{"finit_module", func() Result {
			return gated("finit_module(-1, \"\", 0)", unix.FinitModule(-1, "", 0))
		}},
		{"delete_module", func() Result {
			return gated("delete_module("+noSuchModule+")", unix.DeleteModule(noSuchModule, unix.O_NONBLOCK))
		}},
		{"personality ADDR_NO_RANDOMIZE", func() Result {
			old, _, _ := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0)
			_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, addrNoRandomize, 0, 0)
			if e == 0 {
				unix.RawSyscall(unix.SYS_PERSONALITY, old, 0, 0) // restore
			}
			return attempt("personality(ADDR_NO_RANDOMIZE)", sysErr(e))
		}},
		{"quotactl", func() Result {
			_, _, e := unix.Syscall6(unix.SYS_QUOTACTL, qSyncAllUser, 0, 0, 0, 0, 0)
			return gated("quotactl(Q_SYNC, NULL)", sysErr(e))
		}},
		{"swapon", func() Result {
			path := cstr(noSuchPath)
			_, _, e := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(path)), 0, 0)
			return gated("swapon("+noSuchPath+")", sysErr(e))
		}},
		{"acct", func() Result {
			return gated("acct("+noSuchPath+")", unix.Acct(noSuchPath))
		}},
		{"syslog SIZE_BUFFER", func() Result {
			n, _, e := unix.Syscall(unix.SYS_SYSLOG, syslogSizeBuffer, 0, 0)
			r := attempt("syslog(SYSLOG_ACTION_SIZE_BUFFER)", sysErr(e))
			if e == 0 {
				r.Detail = fmt.Sprintf("syslog: kernel log buffer is %d bytes", n)
			}
			return r
		}},
		{"lsm_list_modules", func() Result {
			var ids [64]uint64
			size := uint32(unsafe.Sizeof(ids))
			n, _, e := unix.Syscall(sysLSMListModules, uintptr(unsafe.Pointer(&ids)), uintptr(unsafe.Pointer(&size)), 0)
			r := attempt("lsm_list_modules", sysErr(e))
			if e == 0 {
				r.Detail = fmt.Sprintf("lsm_list_modules: %d LSM ids: %v", n, ids[:min(int(n), len(ids))])
			}
			return r
		}},
		{"foreign-arch int 0x80", func() Result {
			return runChild(b.inner(), "int80").result("int 0x80 getpid (i386 ABI)")
		}},
		{"foreign-arch x32", func() Result {
			return runChild(b.inner(), "x32").result("x32 getpid")
		}},
	}
	ps := make([]probe, len(cases))
	for i, c := range cases {
		ps[i] = probe{row: 10, name: c.name, run: c.run}
	}
	return ps
}

// childInt80 makes the i386 getpid system call through int 0x80. Where the
// kernel has no i386 gate (built without IA32 emulation, or booted with
// ia32_emulation=0) the instruction faults with SIGSEGV before any system
// call is made, so no filter is consulted: the child reports that the host
// lacks the ABI. soda's filter kills i386 calls with SIGSYS, never SIGSEGV.
func childInt80([]string) (out childOut) {
	if !haveInt80 {
		return childOut{Detail: "int 0x80 is not available on " + runtime.GOARCH}
	}
	debug.SetPanicOnFault(true)
	defer func() {
		if recover() != nil {
			out = childOut{HostLacks: true, Detail: "int 0x80 faulted (SIGSEGV) before any system call: " +
				"the kernel has no i386 ABI (no IA32 emulation, or ia32_emulation=0), so the filter's kill of " +
				"i386 calls cannot be exercised on this host"}
		}
	}()
	r := int32(int80(i386Getpid))
	if r < 0 {
		e := syscall.Errno(-r)
		return childOut{Errno: errnoName(e), Detail: "int 0x80 getpid: " + e.Error()}
	}
	if int(r) != os.Getpid() {
		return childOut{OK: true, Detail: fmt.Sprintf("int 0x80 getpid answered %d (pid %d)", r, os.Getpid())}
	}
	return childOut{OK: true, Detail: fmt.Sprintf("int 0x80 getpid: i386 system call ran (pid %d)", r)}
}

// childX32 makes the getpid system call with the x32 ABI bit set.
func childX32([]string) childOut {
	if runtime.GOARCH != "amd64" {
		return childOut{Detail: "x32 is an amd64 ABI"}
	}
	r, _, e := unix.RawSyscall(x32SyscallBit+unix.SYS_GETPID, 0, 0, 0)
	if e != 0 {
		return childOut{Errno: errnoName(e), Detail: "x32 getpid: " + e.Error()}
	}
	return childOut{OK: true, Detail: fmt.Sprintf("x32 getpid: x32 system call ran (pid %d)", r)}
}

// forkExecTrue starts /bin/true with sys and waits for it: the error is
// that of the clone or unshare done on the way. CLONE_NEWUSER can only be
// unshared by a single-threaded process, which the forked child is.
func forkExecTrue(sys *syscall.SysProcAttr) error {
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: sys})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	if err == nil && !ws.Exited() {
		return fmt.Errorf("child ended with %v", ws)
	}
	return err
}

// namespaceProbes is row 11: new namespaces, joining others, mounting and
// changing the root.
func (b *battery) namespaceProbes() []probe {
	type tc struct {
		name string
		run  func() Result
	}
	cases := []tc{
		{"unshare CLONE_NEWUSER", func() Result {
			return attempt("unshare(CLONE_NEWUSER) in a forked child", forkExecTrue(&syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER}))
		}},
		{"unshare CLONE_NEWNS", func() Result {
			return runChild(b.inner(), "unshare-ns").result("unshare(CLONE_NEWNS)")
		}},
		{"clone CLONE_NEWUSER", func() Result {
			return attempt("clone(CLONE_NEWUSER|SIGCHLD)", forkExecTrue(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}))
		}},
		{"clone3", func() Result {
			_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
			return gated("clone3(NULL, 0)", sysErr(e), unix.ENOSYS, unix.EPERM)
		}},
		{"setns /proc/1/ns/net", func() Result {
			return runChild(b.inner(), "setns").result("setns(/proc/1/ns/net)")
		}},
		{"mount tmpfs", mountTmpfs},
		{"fsopen tmpfs", func() Result {
			fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return attempt("fsopen(tmpfs)", err)
		}},
		{"open_tree OPEN_TREE_CLONE", func() Result {
			fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return attempt("open_tree(/, OPEN_TREE_CLONE)", err)
		}},
		{"pivot_root", func() Result {
			return gated("pivot_root(nonexistent, nonexistent)", unix.PivotRoot(noSuchPath, noSuchPath))
		}},
		{"chroot /tmp", func() Result {
			return runChild(b.inner(), "chroot").result("chroot(/tmp)")
		}},
	}
	ps := make([]probe, len(cases))
	for i, c := range cases {
		ps[i] = probe{row: 11, name: c.name, run: c.run}
	}
	return ps
}

// mountTmpfs mounts a tmpfs on a fresh directory and, if that works,
// unmounts it again at once.
func mountTmpfs() Result {
	dir, err := os.MkdirTemp("", "sbxprobe-mnt-")
	if err != nil {
		return Result{Errno: errnoName(err), Detail: "cannot create a mount point: " + err.Error()}
	}
	defer os.Remove(dir)
	err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k")
	if err == nil {
		if uerr := unix.Unmount(dir, unix.MNT_DETACH); uerr != nil {
			return Result{Detail: fmt.Sprintf("mount(tmpfs, %s): succeeded; unmount failed: %v", dir, uerr)}
		}
	}
	return attempt("mount(tmpfs, "+dir+")", err)
}

// childSetns joins pid 1's network namespace on a thread that dies with
// the process.
func childSetns([]string) childOut {
	runtime.LockOSThread()
	fd, err := unix.Open("/proc/1/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return outOf("open /proc/1/ns/net", err)
	}
	return outOf("setns(/proc/1/ns/net, 0)", unix.Setns(fd, 0))
}

// childUnshareNS unshares the mount namespace of one thread (CLONE_NEWNS
// only implies CLONE_FS, so a multi-threaded process may do it).
func childUnshareNS([]string) childOut {
	runtime.LockOSThread()
	return outOf("unshare(CLONE_NEWNS)", unix.Unshare(unix.CLONE_NEWNS))
}

// childChroot changes this child's root directory to /tmp.
func childChroot([]string) childOut {
	return outOf("chroot(/tmp)", unix.Chroot("/tmp"))
}

// childExecveat runs /bin/true from a descriptor with AT_EMPTY_PATH. On
// success the child becomes /bin/true and prints nothing.
func childExecveat([]string) childOut {
	fd, err := unix.Open("/bin/true", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return outOf("open /bin/true", err)
	}
	argv := []*byte{cstr("true"), nil}
	envv := []*byte{nil}
	empty := cstr("")
	_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
	return outOf("execveat(fd of /bin/true, \"\", AT_EMPTY_PATH)", sysErr(e))
}

// ldso is the x86_64 dynamic loader, which maps a program itself and so
// can start one that exec() would refuse.
const ldso = "/lib64/ld-linux-x86-64.so.2"

// execTrickProbes is row 12: fileless and loader-based execution.
func (b *battery) execTrickProbes() []probe {
	return []probe{
		{row: 12, name: "memfd_create", run: func() Result {
			fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return attempt("memfd_create(x)", err)
		}},
		{row: 12, name: "execveat AT_EMPTY_PATH", run: func() Result {
			c := runChild(b.inner(), "execveat")
			if !c.timedOut && c.startErr == nil && c.signal == 0 && c.out == nil && c.code == 0 {
				return Result{Detail: "execveat(AT_EMPTY_PATH) ran /bin/true from a descriptor"}
			}
			return c.result("execveat")
		}},
		{row: 12, name: "ld.so /tmp program", info: true, run: func() Result {
			return b.ldsoProbe()
		}},
	}
}

// ldsoProbe copies /bin/true into /tmp (not executable) and starts it
// through the dynamic loader.
func (b *battery) ldsoProbe() Result {
	if _, err := os.Stat(ldso); err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: "no loader: " + err.Error()}
	}
	dst := fmt.Sprintf("/tmp/sbxprobe-ldso-%d", os.Getpid())
	if err := copyFile("/bin/true", dst, 0o644); err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: "copy /bin/true to /tmp: " + err.Error()}
	}
	defer os.Remove(dst)
	out, err := runTimeout(b.inner(), ldso, dst)
	if err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: fmt.Sprintf("%s %s: %v %s", ldso, dst, err, firstLine(out))}
	}
	return Result{Detail: fmt.Sprintf("%s %s ran (exit 0): the loader maps programs from /tmp", ldso, dst)}
}

// runTimeout runs a program with stdin from /dev/null and returns its
// combined output.
func runTimeout(timeout time.Duration, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.WaitDelay = 100 * time.Millisecond
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return out.String(), err
	case <-t.C:
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("timed out after %v: %w", timeout, os.ErrDeadlineExceeded)
	}
}

// firstLine returns the first line of s, trimmed.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
