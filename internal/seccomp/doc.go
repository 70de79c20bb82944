// Package seccomp builds and installs the seccomp-BPF filter that soda
// applies to an AI agent's process tree.
//
// The filter is the syscall layer of soda's sandbox. The other layers are
// not here: namespaces (the agent runs in its own PID, mount and network
// namespaces), Landlock (which paths it may touch) and a cgroup (how much
// it may use). This layer removes kernel interfaces that the agent's tools
// (Node.js 20, npm, git, python3, bash, coreutils) do not need and that
// would let it escape or widen the other layers: namespace and mount
// calls, ptrace-like access to other processes, kernel modules, BPF, keys,
// io_uring, raw and exotic sockets, terminal injection.
//
// # Use
//
// Install is called by the sandbox's init, last of its own confinement,
// right before it forks the agent (which inherits the filter):
//
//	runtime.LockOSThread()
//	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil { … }
//	if err := seccomp.Install(); err != nil { … }
//	proc, err := os.StartProcess(path, argv, attr)
//
// no_new_privs is a per-thread attribute, hence the locked thread: Install
// checks it with prctl(PR_GET_NO_NEW_PRIVS) on the thread it runs on and
// refuses (ErrNoNewPrivs) if it is not set, even for root. The filter is
// installed with SECCOMP_FILTER_FLAG_TSYNC, so every thread of the Go
// process gets it (and no_new_privs) atomically, and it is inherited
// across fork and exec by everything the agent starts. Available says
// whether the kernel can enforce it; Program returns the program itself,
// which the tests run through x/net/bpf's VM.
//
// # Policy
//
// The filter is default-allow with a deny list, in this order:
//
//  1. Architecture. A syscall whose seccomp_data.arch is not the native
//     AUDIT_ARCH (i386 through int $0x80 on x86_64, aarch32 on aarch64)
//     kills the process, and so does, on x86_64, any number from
//     0x40000000 up: x32 syscalls (bit 0x40000000 set), and also -1.
//     Those ABIs number syscalls differently, so none of the rules below
//     would apply to them.
//  2. ENOSYS: clone3, io_uring_setup/enter/register, and openat2 (its
//     mode is in a struct the filter cannot read; callers fall back).
//  3. EPERM whatever the arguments: ptrace, process_vm_readv/writev,
//     pidfd_getfd, pidfd_send_signal, kcmp, process_madvise; mount,
//     umount2, pivot_root, chroot, unshare, setns and the new mount API
//     (mount_setattr, move_mount, open_tree, open_tree_attr, fsopen,
//     fsconfig, fsmount, fspick); reboot, kexec_*, module calls, swap,
//     acct, quotactl(_fd), syslog, clock and time setting (settimeofday,
//     clock_settime, clock_adjtime, adjtimex), vhangup, sysfs, ustat,
//     uselib, lookup_dcookie, nfsservctl, _sysctl; userfaultfd, bpf,
//     perf_event_open, keyctl, add_key, request_key, lsm_*, fanotify_init,
//     migrate_pages, move_pages; memfd_create, memfd_secret,
//     name_to_handle_at, open_by_handle_at; and on x86_64 iopl, ioperm,
//     modify_ldt. The full list is epermSyscalls in policy_linux.go.
//  4. EPERM depending on arguments:
//     clone with any CLONE_NEW* flag (flags are argument 0 on both
//     architectures, whose clone argument orders otherwise differ);
//     ioctl TIOCSTI, TIOCLINUX and TIOCCONS (CVE-2019-10063 style terminal
//     injection); socket other than AF_INET/AF_INET6 with SOCK_STREAM or
//     SOCK_DGRAM (SOCK_CLOEXEC and SOCK_NONBLOCK are masked off the type);
//     socketpair other than AF_UNIX; kill(-1, …); kill, tkill, tgkill,
//     rt_sigqueueinfo and rt_tgsigqueueinfo aimed at PID 1 (the sandbox's init, which runs
//     under this filter too and relays the sandbox's egress), and
//     prlimit64 on it or fcntl F_SETOWN to it (F_SETOWN_EX altogether);
//     chmod, fchmod, fchmodat(2), open, openat, creat, mknod(at) and
//     mkdir(at) with a setuid or setgid bit (a granted directory may be
//     idmapped to its owner on the host, where nosuid does not hold);
//     socket protocols other than the default, TCP, UDP and ICMP (no
//     module autoloading through SCTP and friends); personality
//     other than 0 (PER_LINUX) and
//     0xffffffff (query); execveat with AT_EMPTY_PATH; prctl(PR_SET_MM).
//  5. Everything else is allowed, seccomp(2) and landlock_* included:
//     a filter or ruleset the agent adds can only narrow what it may do.
//
// # Choices
//
// EPERM, not kill. Agents and their tools probe for features: a
// language runtime tries memfd_create, a test suite tries unshare, npm
// scripts try whatever they try. An errno is an answer they can handle
// and report; a SIGSYS death is an opaque crash that gets retried and
// misread. Killing is kept for the foreign ABIs, where no legitimate tool
// goes and where the numbers cannot be judged.
//
// ENOSYS where a library falls back. glibc tries clone3 first and falls
// back to clone only on ENOSYS (pthread_create, posix_spawn); EPERM would
// make thread and process creation fail. io_uring users (libuv in
// Node.js 20, liburing, tokio) read ENOSYS as "kernel without io_uring"
// and use their thread pools. clone3 is refused because its flags sit
// behind a pointer the filter cannot read, while clone's flags are a
// register; io_uring because its operations (openat, connect, …) run in
// the kernel without passing through this filter.
//
// The low 32 bits only. Every argument the filter inspects is a 32-bit
// int or unsigned int in the kernel's prototype (ioctl's cmd, socket's
// domain and type, kill's pid, prctl's option, personality, execveat's
// flags), or is truncated with lower_32_bits by the kernel (clone's
// flags). The kernel ignores the upper half of the register, so the filter
// must too: a full 64-bit comparison would let ioctl(fd, 1<<32|TIOCSTI)
// through while the kernel runs TIOCSTI. The filter loads only the low
// word of each argument (offset 16+8*i: both supported architectures are
// little-endian).
//
// No AF_UNIX socket. Unix sockets reach host daemons through any
// socket file the mount namespace and Landlock leave visible. Programs that
// use them opportunistically carry on after EPERM: glibc's nscd client, the
// syslog(3) /dev/log writer. socketpair(AF_UNIX) stays allowed: it reaches
// nothing outside the process, and libuv creates its child processes'
// stdio pipes with it, as Python's multiprocessing does its channels.
//
// # Why hand-assembled
//
// The program is assembled with golang.org/x/net/bpf (plus a small label
// assembler, asm_linux.go) rather than with github.com/elastic/go-seccomp-bpf,
// whose policy language cannot express the rules safely: its argument
// conditions always compare all 64 bits (Equal also requires the high word
// to match), so a deny rule for ioctl TIOCSTI is bypassed by setting a high
// bit of cmd, which the kernel then drops; and it has no AND-mask
// operation, so socket's type could only be matched by enumerating every
// SOCK_CLOEXEC/SOCK_NONBLOCK combination. Hand assembly is about 110
// instructions, and the tests run the exact program through x/net/bpf's
// VM and through the kernel.
// go-seccomp-bpf is still used by the tests, as a syscall-number table
// generated independently of golang.org/x/sys.
//
// Syscall numbers come from golang.org/x/sys/unix (SYS_*), which has all
// of them, including the newest (lsm_* 459-461, Linux 6.8; open_tree_attr
// 467, Linux 6.15). A kernel older than a syscall answers ENOSYS to it
// without the filter; with it, EPERM, which makes no difference. The
// tests cross-check the numbers against go-seccomp-bpf's table and the
// installed kernel headers. Only x86_64 and aarch64 have tables; elsewhere
// Program and Install return ErrUnsupportedArch.
//
// The filter's prologue only tests the architecture and the syscall
// number, so since Linux 5.11 the kernel's seccomp action cache lets
// every syscall without an argument rule bypass the filter entirely.
//
// # Known limits
//
// Seccomp sees registers, not memory. It cannot read pointer arguments:
// connect, sendto and bind destinations (network reach is the network
// namespace's job), paths given to open, execve or mount (Landlock's job),
// clone3's argument struct (hence ENOSYS). It cannot see which device an
// ioctl goes to, only the command number.
//
// It is a deny list. A syscall added by a future kernel is allowed until
// it is listed here; new kernels must be reviewed against this list.
//
// Some answers break features on purpose: Go programs run by the agent
// see pidfd_send_signal refused and fall back to kill(2); tools that need
// memfd_create (some JITs and sandboxes) fail with EPERM; dmesg fails;
// kill(-1) fails, but kill(0) and kill(-pgid) still reach whole process
// groups for shells' job control, bounded by the PID namespace. tkill and
// tgkill stay allowed except towards PID 1. The sandbox's init itself,
// being PID 1 under the filter, cannot send itself Go's preemption signal
// (tgkill(1, …)); its goroutines only wait for I/O, so cooperative
// scheduling is enough.
//
// A filter cannot be removed once installed; stacked filters can only add
// restrictions, and the strictest verdict wins.
package seccomp
