package seccomp

import (
	"fmt"
	"slices"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// enosysSyscalls fail with ENOSYS: libraries treat ENOSYS as "this kernel
// is too old" and fall back (glibc's clone3 to clone, libuv's io_uring to
// its thread pool).
var enosysSyscalls = [...]string{
	// openat2 takes its mode inside a struct the filter cannot read (see
	// the mode rules); callers fall back to openat.
	"openat2",
	"clone3",
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
}

// epermSyscalls fail with EPERM whatever their arguments. A name absent
// from an architecture's table (iopl on aarch64, say) must be listed in
// that table's absent list; it is then skipped there.
var epermSyscalls = [...]string{
	// Looking into or steering other processes.
	"ptrace",
	"process_vm_readv",
	"process_vm_writev",
	"pidfd_getfd",
	"pidfd_send_signal",
	"kcmp",
	"process_madvise",
	// Mounts, namespaces, root changes.
	"mount",
	"umount2",
	"pivot_root",
	"chroot",
	"unshare",
	"setns",
	"mount_setattr",
	"move_mount",
	"open_tree",
	"open_tree_attr",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	// Whole-machine state: power, kernel code, swap, accounting, clocks.
	"reboot",
	"kexec_load",
	"kexec_file_load",
	"init_module",
	"finit_module",
	"delete_module",
	"create_module",
	"get_kernel_syms",
	"query_module",
	"nfsservctl",
	"_sysctl",
	"swapon",
	"swapoff",
	"acct",
	"quotactl",
	"quotactl_fd",
	"syslog",
	"settimeofday",
	"clock_settime",
	"clock_adjtime",
	"adjtimex",
	"vhangup",
	"sysfs",
	"ustat",
	"uselib",
	"lookup_dcookie",
	// Kernel attack surface with no use for the agent's tools.
	"userfaultfd",
	"bpf",
	"perf_event_open",
	"keyctl",
	"add_key",
	"request_key",
	"lsm_get_self_attr",
	"lsm_set_self_attr",
	"lsm_list_modules",
	"fanotify_init",
	"migrate_pages",
	"move_pages",
	// Anonymous executable files and handle-based opens (bypass paths).
	"memfd_create",
	"memfd_secret",
	"name_to_handle_at",
	"open_by_handle_at",
	// x86 hardware access.
	"iopl",
	"ioperm",
	"modify_ldt",
}

// argSyscalls are the syscalls whose verdict depends on their arguments;
// build emits one block for each.
var argSyscalls = [...]string{
	"clone",
	"ioctl",
	"socket",
	"socketpair",
	"kill",
	"tkill",
	"tgkill",
	"rt_sigqueueinfo",
	"rt_tgsigqueueinfo",
	"personality",
	"execveat",
	"prctl",
	"prlimit64",
	"fcntl",
	// Mode rules: the ones missing on an architecture are skipped.
	"chmod", "fchmod", "fchmodat", "fchmodat2",
	"open", "openat", "creat", "mknod", "mknodat", "mkdir", "mkdirat",
}

// modeArg gives, for each syscall that sets a file mode, the argument
// holding it. Setuid and setgid bits are refused: a granted directory may
// be idmapped to its owner on the host, where the mount's nosuid does not
// apply, so a setuid file made in the sandbox would be a setuid file of
// that owner (root, for a root-owned grant) on the host.
var modeArg = map[string]int{
	"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2,
	"open": 2, "openat": 3, "creat": 1, "mknod": 1, "mknodat": 2, "mkdir": 1, "mkdirat": 2,
}

// Offsets into struct seccomp_data { int nr; __u32 arch; __u64
// instruction_pointer; __u64 args[6]; }. Seccomp loads 32-bit words in
// native byte order and every supported architecture is little-endian, so
// the low half of args[i] is at offArgs+8*i.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow returns the offset of the low 32 bits of syscall argument i.
func argLow(i int) uint32 {
	return offArgs + 8*uint32(i)
}

// Filter verdicts.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// x32SyscallBit marks x32 syscalls, which run with AUDIT_ARCH_X86_64.
const x32SyscallBit = 0x40000000

// cloneNamespaceFlags are the clone flags that create namespaces.
// CLONE_NEWTIME (0x80) overlaps the exit-signal byte of clone(2), so the
// kernel rejects it there anyway; it is listed for clarity.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWTIME

// sockTypeMask selects the socket type from socket(2)'s type argument,
// leaving out SOCK_CLOEXEC and SOCK_NONBLOCK (the kernel's SOCK_TYPE_MASK).
const sockTypeMask = 0xf

// Values the argument rules compare against. They are the same on x86_64
// and aarch64.
const (
	personalityLinux = 0          // PER_LINUX
	personalityQuery = 0xffffffff // personality(0xffffffff) only reads
	killAll          = 0xffffffff // kill(-1, sig) as a 32-bit pid_t
	sandboxInit      = 1          // the sandbox's init: PID 1 of its PID namespace
)

// archInfo is one architecture's syscall table.
type archInfo struct {
	name      string            // Linux architecture name
	auditArch uint32            // AUDIT_ARCH_* of the native ABI
	x32       bool              // kill syscall numbers with x32SyscallBit set
	nums      map[string]uint32 // syscall numbers by name
	absent    []string          // policy names with no number on this architecture
}

// lookup returns the number of a syscall named by the policy. ok is false
// when the syscall does not exist on the architecture; an error means the
// table is incomplete.
func (a *archInfo) lookup(name string) (nr uint32, ok bool, err error) {
	if nr, ok := a.nums[name]; ok {
		return nr, true, nil
	}
	if slices.Contains(a.absent, name) {
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("seccomp: syscall %q has no number in the %s table", name, a.name)
}

// resolve maps policy names to numbers, skipping the absent ones.
func (a *archInfo) resolve(names []string) ([]uint32, error) {
	nrs := make([]uint32, 0, len(names))
	for _, name := range names {
		nr, ok, err := a.lookup(name)
		if err != nil {
			return nil, err
		}
		if ok {
			nrs = append(nrs, nr)
		}
	}
	return nrs, nil
}

// build assembles the filter for arch, its layers in the order of the
// package documentation's policy (the emitters are in rules_linux.go),
// then the argument rules' blocks and the verdicts they all jump to.
func build(arch *archInfo) ([]bpf.Instruction, error) {
	nrs, err := resolvePolicy(arch)
	if err != nil {
		return nil, err
	}
	f := newFilterBuilder()
	f.foreignABIs(arch)                    // 1. foreign ABIs die
	f.unconditional(nrs)                   // 2. ENOSYS and 3. EPERM by number
	blocks := f.dispatch(nrs.arg)          // 4. argument rules, by number
	f.emit(bpf.RetConstant{Val: retAllow}) // 5. everything else
	f.argRules(blocks)                     // 4. the argument rules' blocks
	f.verdicts()

	prog, err := f.assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble %s filter: %w", arch.name, err)
	}
	return prog, nil
}

// policyNumbers are the policy's syscalls as arch numbers them.
type policyNumbers struct {
	enosys []uint32          // enosysSyscalls present on the architecture
	eperm  []uint32          // epermSyscalls present on the architecture
	arg    map[string]uint32 // argSyscalls present, by name
}

// resolvePolicy numbers the policy's syscalls for arch. A mode rule's
// syscall may be missing (a legacy call the architecture never had); any
// other argument rule's syscall must exist.
func resolvePolicy(arch *archInfo) (policyNumbers, error) {
	enosys, err := arch.resolve(enosysSyscalls[:])
	if err != nil {
		return policyNumbers{}, err
	}
	eperm, err := arch.resolve(epermSyscalls[:])
	if err != nil {
		return policyNumbers{}, err
	}
	argNrs := make(map[string]uint32, len(argSyscalls))
	for _, name := range argSyscalls {
		nr, ok, err := arch.lookup(name)
		if err != nil {
			return policyNumbers{}, err
		}
		if !ok {
			if _, isMode := modeArg[name]; isMode {
				continue // a legacy call this architecture does not have
			}
			return policyNumbers{}, fmt.Errorf("seccomp: %s has no %s syscall", arch.name, name)
		}
		argNrs[name] = nr
	}
	return policyNumbers{enosys: enosys, eperm: eperm, arg: argNrs}, nil
}
