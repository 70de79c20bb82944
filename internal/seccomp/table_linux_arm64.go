package seccomp

import "golang.org/x/sys/unix"

// thisArch is aarch64: it never had the legacy x86 calls listed in absent,
// and has no x32-like ABI (aarch32 tasks run with AUDIT_ARCH_ARM and are
// killed by the architecture check).
func thisArch() archInfo {
	return archInfo{
		name:      "aarch64",
		auditArch: unix.AUDIT_ARCH_AARCH64,
		absent: []string{
			"create_module", "get_kernel_syms", "query_module", "_sysctl",
			"sysfs", "ustat", "uselib", "iopl", "ioperm", "modify_ldt",
			"chmod", "open", "creat", "mknod", "mkdir",
		},
	}
}
