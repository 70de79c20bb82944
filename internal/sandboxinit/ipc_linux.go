package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The sandbox's IPC namespace is its own, with the kernel's defaults for
// a new one: System V shared memory up to 16 EiB (shmmax, shmall), 32,000
// message queues of 16 KiB and 32,000 semaphore sets of 32,000
// semaphores. What those hold is kernel memory charged to the sandbox's
// memory cgroup, but it stays when the process that made it ends: in a
// live sandbox (sessions) a command could leave up to the memory limit
// pinned for the next ones, outside /tmp's size. limitIPC bounds each,
// from init, which owns the namespace (its sysctls are written through
// the sandbox's own /proc):
//
//   - shared memory: at most TmpSize in all (kernel.shmall, in pages) and
//     per segment (kernel.shmmax), and kernel.shm_rmid_forced=1: a segment
//     no process has attached is removed when its last user exits, so
//     none outlives the command that made it;
//   - message queues: 32 (kernel.msgmni), of 16 KiB each, 512 KiB in all;
//   - semaphores: the kernel's limits before 5.x scaled them up, "250
//     32000 32 128" (kernel.sem): 32,000 semaphores, about 2 MiB.
//
// POSIX message queues (mq_open) need no sysctl: the kernel bounds the
// bytes one user's queues hold by RLIMIT_MSGQUEUE, which confine sets
// (msgQueueBytes), in the sandbox's user namespace (its own uid as root).
//
// An unprivileged sandbox cannot: the kernel lets only uid 0 of the user
// namespace that owns an IPC namespace write its sysctls (ipc_permissions
// compares the euid, capabilities do not count), and the sandbox's user
// namespace maps its user's uid alone, as itself. There its System V IPC
// keeps the kernel's defaults, charged to its memory limit where it has
// one; limitIPC says so instead of failing.
func limitIPC(cfg *config) (string, error) {
	if cfg.UserNS {
		return "IPC namespace: System V IPC at the kernel's defaults (only uid 0 of the sandbox's user namespace may bound them, and it maps none); POSIX queues " + strconv.Itoa(msgQueueBytes) + " bytes", nil
	}
	tmpSize := cfg.TmpSize
	page := int64(os.Getpagesize())
	for _, s := range []struct{ name, value string }{
		{"kernel/shmmax", strconv.FormatInt(tmpSize, 10)},
		{"kernel/shmall", strconv.FormatInt((tmpSize+page-1)/page, 10)},
		{"kernel/shm_rmid_forced", "1"},
		{"kernel/msgmni", "32"},
		{"kernel/sem", "250 32000 32 128"},
	} {
		p := filepath.Join("/proc/sys", s.name)
		if err := os.WriteFile(p, []byte(s.value), 0); err != nil {
			return "", fmt.Errorf("limit System V IPC in the sandbox's IPC namespace: %w", err)
		}
	}
	return fmt.Sprintf("IPC namespace: shared memory at most %d bytes, removed with its last user; 32 message queues; 32,000 semaphores; POSIX queues %d bytes", tmpSize, msgQueueBytes), nil
}

// msgQueueBytes is the sandbox user's RLIMIT_MSGQUEUE: the kernel's
// default, set whatever its starter had.
const msgQueueBytes = 819200
