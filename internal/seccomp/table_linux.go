//go:build linux && (amd64 || arm64)

package seccomp

import (
	"maps"

	"golang.org/x/sys/unix"
)

// commonSyscalls are the policy's syscalls that x86_64 and aarch64 both
// have. golang.org/x/sys/unix gives each its number for the architecture
// being built (zsysnum_linux_*.go, generated from the kernel's tables);
// the newest, the same on both: clone3 435, io_uring_* 425-427, fsopen
// 430 … fspick 433, pidfd_getfd 438, process_madvise 440, mount_setattr
// 442, quotactl_fd 443, memfd_secret 447, fchmodat2 452, lsm_* 459-461
// and open_tree_attr 467 (Linux 6.15). TestSyscallNumbers cross-checks
// them against the kernel headers and an independent table.
var commonSyscalls = map[string]uint32{
	"clone3":            unix.SYS_CLONE3,
	"io_uring_setup":    unix.SYS_IO_URING_SETUP,
	"io_uring_enter":    unix.SYS_IO_URING_ENTER,
	"io_uring_register": unix.SYS_IO_URING_REGISTER,
	"ptrace":            unix.SYS_PTRACE,
	"process_vm_readv":  unix.SYS_PROCESS_VM_READV,
	"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
	"pidfd_getfd":       unix.SYS_PIDFD_GETFD,
	"pidfd_send_signal": unix.SYS_PIDFD_SEND_SIGNAL,
	"kcmp":              unix.SYS_KCMP,
	"process_madvise":   unix.SYS_PROCESS_MADVISE,
	"mount":             unix.SYS_MOUNT,
	"umount2":           unix.SYS_UMOUNT2,
	"pivot_root":        unix.SYS_PIVOT_ROOT,
	"chroot":            unix.SYS_CHROOT,
	"unshare":           unix.SYS_UNSHARE,
	"setns":             unix.SYS_SETNS,
	"mount_setattr":     unix.SYS_MOUNT_SETATTR,
	"move_mount":        unix.SYS_MOVE_MOUNT,
	"open_tree":         unix.SYS_OPEN_TREE,
	"open_tree_attr":    unix.SYS_OPEN_TREE_ATTR,
	"fsopen":            unix.SYS_FSOPEN,
	"fsconfig":          unix.SYS_FSCONFIG,
	"fsmount":           unix.SYS_FSMOUNT,
	"fspick":            unix.SYS_FSPICK,
	"reboot":            unix.SYS_REBOOT,
	"kexec_load":        unix.SYS_KEXEC_LOAD,
	"kexec_file_load":   unix.SYS_KEXEC_FILE_LOAD,
	"init_module":       unix.SYS_INIT_MODULE,
	"finit_module":      unix.SYS_FINIT_MODULE,
	"delete_module":     unix.SYS_DELETE_MODULE,
	"nfsservctl":        unix.SYS_NFSSERVCTL,
	"swapon":            unix.SYS_SWAPON,
	"swapoff":           unix.SYS_SWAPOFF,
	"acct":              unix.SYS_ACCT,
	"quotactl":          unix.SYS_QUOTACTL,
	"quotactl_fd":       unix.SYS_QUOTACTL_FD,
	"syslog":            unix.SYS_SYSLOG,
	"settimeofday":      unix.SYS_SETTIMEOFDAY,
	"clock_settime":     unix.SYS_CLOCK_SETTIME,
	"clock_adjtime":     unix.SYS_CLOCK_ADJTIME,
	"adjtimex":          unix.SYS_ADJTIMEX,
	"vhangup":           unix.SYS_VHANGUP,
	"lookup_dcookie":    unix.SYS_LOOKUP_DCOOKIE,
	"userfaultfd":       unix.SYS_USERFAULTFD,
	"bpf":               unix.SYS_BPF,
	"perf_event_open":   unix.SYS_PERF_EVENT_OPEN,
	"keyctl":            unix.SYS_KEYCTL,
	"add_key":           unix.SYS_ADD_KEY,
	"request_key":       unix.SYS_REQUEST_KEY,
	"lsm_get_self_attr": unix.SYS_LSM_GET_SELF_ATTR,
	"lsm_set_self_attr": unix.SYS_LSM_SET_SELF_ATTR,
	"lsm_list_modules":  unix.SYS_LSM_LIST_MODULES,
	"fanotify_init":     unix.SYS_FANOTIFY_INIT,
	"migrate_pages":     unix.SYS_MIGRATE_PAGES,
	"move_pages":        unix.SYS_MOVE_PAGES,
	"memfd_create":      unix.SYS_MEMFD_CREATE,
	"memfd_secret":      unix.SYS_MEMFD_SECRET,
	"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
	"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"clone":             unix.SYS_CLONE,
	"ioctl":             unix.SYS_IOCTL,
	"socket":            unix.SYS_SOCKET,
	"socketpair":        unix.SYS_SOCKETPAIR,
	"kill":              unix.SYS_KILL,
	"fchmod":            unix.SYS_FCHMOD,
	"fchmodat":          unix.SYS_FCHMODAT,
	"fchmodat2":         unix.SYS_FCHMODAT2,
	"openat":            unix.SYS_OPENAT,
	"mknodat":           unix.SYS_MKNODAT,
	"mkdirat":           unix.SYS_MKDIRAT,
	"prlimit64":         unix.SYS_PRLIMIT64,
	"fcntl":             unix.SYS_FCNTL,
	"openat2":           unix.SYS_OPENAT2,
	"tkill":             unix.SYS_TKILL,
	"tgkill":            unix.SYS_TGKILL,
	"rt_sigqueueinfo":   unix.SYS_RT_SIGQUEUEINFO,
	"rt_tgsigqueueinfo": unix.SYS_RT_TGSIGQUEUEINFO,
	"personality":       unix.SYS_PERSONALITY,
	"execveat":          unix.SYS_EXECVEAT,
	"prctl":             unix.SYS_PRCTL,
}

// nativeArch returns the table of the architecture being built: the
// common syscalls plus its own, and the policy's syscalls
// it does not have (thisArch).
func nativeArch() (*archInfo, error) {
	a := thisArch()
	nums := maps.Clone(commonSyscalls)
	maps.Copy(nums, a.nums)
	a.nums = nums
	return &a, nil
}
