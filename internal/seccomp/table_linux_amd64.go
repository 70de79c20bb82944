package seccomp

import "golang.org/x/sys/unix"

// thisArch is x86_64: the legacy calls aarch64 never had, and the x32
// ABI, whose syscalls run with AUDIT_ARCH_X86_64 and are killed by
// number (x32SyscallBit).
func thisArch() archInfo {
	return archInfo{
		name:      "x86_64",
		auditArch: unix.AUDIT_ARCH_X86_64,
		x32:       true,
		nums: map[string]uint32{
			"create_module":   unix.SYS_CREATE_MODULE,
			"get_kernel_syms": unix.SYS_GET_KERNEL_SYMS,
			"query_module":    unix.SYS_QUERY_MODULE,
			"_sysctl":         unix.SYS__SYSCTL,
			"sysfs":           unix.SYS_SYSFS,
			"ustat":           unix.SYS_USTAT,
			"uselib":          unix.SYS_USELIB,
			"iopl":            unix.SYS_IOPL,
			"ioperm":          unix.SYS_IOPERM,
			"modify_ldt":      unix.SYS_MODIFY_LDT,
			"chmod":           unix.SYS_CHMOD,
			"open":            unix.SYS_OPEN,
			"creat":           unix.SYS_CREAT,
			"mknod":           unix.SYS_MKNOD,
			"mkdir":           unix.SYS_MKDIR,
		},
	}
}
