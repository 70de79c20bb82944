package seccomp

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Error is the type of this package's sentinel errors; being a string
// type, they are constants and compare with errors.Is.
type Error string

// Error returns the message.
func (e Error) Error() string { return string(e) }

const (
	// ErrUnsupportedArch is returned on architectures without a syscall
	// table (anything but amd64 and arm64).
	ErrUnsupportedArch Error = "seccomp: unsupported architecture"

	// ErrNoNewPrivs is returned by Install when the calling thread has not
	// set no_new_privs.
	ErrNoNewPrivs Error = "seccomp: no_new_privs is not set on the calling thread " +
		"(call runtime.LockOSThread, then prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), before Install)"
)

// actionsAvail lists the filter actions the kernel supports.
const actionsAvail = "/proc/sys/kernel/seccomp/actions_avail"

// Program returns the filter for the running architecture as a classic BPF
// program, ready for seccomp(SECCOMP_SET_MODE_FILTER).
func Program() ([]unix.SockFilter, error) {
	arch, err := nativeArch()
	if err != nil {
		return nil, err
	}
	prog, err := build(arch)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: encode filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// Install applies the filter to every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC), to be inherited by everything it execs and
// forks. It is meant to run right before syscall.Exec of the agent.
//
// no_new_privs must already be set on the calling thread, otherwise
// Install returns ErrNoNewPrivs: lock the goroutine to its thread
// (runtime.LockOSThread), call prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), then
// Install and exec. The kernel copies no_new_privs to the other threads
// together with the filter.
func Install() error {
	prog, err := Program()
	if err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("install seccomp filter: prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		return fmt.Errorf("install seccomp filter: %w", ErrNoNewPrivs)
	}

	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		// With TSYNC, a positive result is the ID of a thread that could
		// not be synchronised (it runs a filter of its own that is not an
		// ancestor of ours); nothing was installed.
		return fmt.Errorf("install seccomp filter: thread %d cannot take the filter (TSYNC failed)", r)
	}
	return nil
}

// Available reports whether the kernel can enforce the filter: seccomp
// filter mode is built in (prctl(PR_GET_SECCOMP) works and actions_avail
// exists), the errno and kill_process actions are available, and the
// architecture has a syscall table. The error says what is missing.
func Available() error {
	if _, err := nativeArch(); err != nil {
		return fmt.Errorf("seccomp unavailable: %w", err)
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp unavailable: prctl(PR_GET_SECCOMP): %w (kernel built without CONFIG_SECCOMP?)", err)
	}
	data, err := os.ReadFile(actionsAvail)
	if err != nil {
		return fmt.Errorf("seccomp unavailable: %w (kernel without CONFIG_SECCOMP_FILTER, or older than 4.14)", err)
	}
	if missing := missingActions(string(data)); len(missing) > 0 {
		return fmt.Errorf("seccomp unavailable: %s lacks %s", actionsAvail, strings.Join(missing, ", "))
	}
	return nil
}

// missingActions returns the actions the filter needs that are not in the
// contents of actions_avail.
func missingActions(avail string) []string {
	have := strings.Fields(avail)
	var missing []string
	for _, need := range []string{"errno", "kill_process"} {
		if !slices.Contains(have, need) {
			missing = append(missing, need)
		}
	}
	return missing
}
