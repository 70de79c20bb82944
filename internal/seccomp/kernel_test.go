//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel tests re-execute the test binary. With childEnv set, TestMain
// does not run tests: it sets no_new_privs, installs the filter (unless
// noFilterEnv is set: the control run), runs the probe named by childEnv
// and prints "result=<OK|errno name>".
const (
	childEnv    = "SODA_SECCOMP_TEST_CHILD"
	noFilterEnv = "SODA_SECCOMP_TEST_NOFILTER" // "1": skip Install (control run)
	resultTag   = "result="
)

// Probes that are not syscalls.
const (
	probeExec  = "exec"  // Install, then exec os.Args[1:]
	probeNoNNP = "nonnp" // Install without no_new_privs
	probeTSYNC = "tsync" // the filter reaches a thread started before Install
)

func TestMain(m *testing.M) {
	if probe := os.Getenv(childEnv); probe != "" {
		os.Exit(child(probe))
	}
	os.Exit(m.Run())
}

// child is the re-executed test binary.
func child(probe string) int {
	runtime.LockOSThread()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
		return 2
	}

	if probe == probeNoNNP {
		if nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); nnp == 1 {
			fmt.Println(resultTag + "inherited-nnp")
			return 0
		}
		err := Install()
		fmt.Println(resultTag + errResult(err))
		if err != nil {
			fmt.Println("error=" + err.Error())
		}
		return 0
	}

	// A thread that exists before Install, for the TSYNC probe.
	var tsync chan chan string
	if probe == probeTSYNC {
		tsync = make(chan chan string)
		ready := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(ready)
			reply := <-tsync
			r := errResult(closing(sys(unix.SYS_MEMFD_CREATE, bytePtr("x"), 0)))
			status, _ := os.ReadFile("/proc/thread-self/status")
			for _, line := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(line, "Seccomp:") || strings.HasPrefix(line, "NoNewPrivs:") {
					r += " " + strings.Join(strings.Fields(line), "")
				}
			}
			reply <- r
		}()
		<-ready
	}

	if os.Getenv(noFilterEnv) != "1" {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fail("prctl(PR_SET_NO_NEW_PRIVS): %v", err)
		}
		if err := Install(); err != nil {
			return fail("%v", err)
		}
	}

	switch probe {
	case probeExec:
		if len(os.Args) < 2 {
			return fail("exec: no command")
		}
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "SODA_SECCOMP_TEST_")
		})
		// A killed probe must not leave a core file behind.
		_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
		err := syscall.Exec(os.Args[1], os.Args[1:], env)
		return fail("exec %s: %v", os.Args[1], err)
	case probeTSYNC:
		reply := make(chan string)
		tsync <- reply
		fmt.Println(resultTag + <-reply)
		return 0
	}
	p, ok := probes()[probe]
	if !ok {
		return fail("unknown probe %q", probe)
	}
	fmt.Println(resultTag + errResult(p()))
	return 0
}

// errResult names a probe outcome: OK, an errno name, or the error text.
func errResult(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "OK"
	case errors.As(err, &errno) && unix.ErrnoName(errno) != "":
		return unix.ErrnoName(errno)
	case errors.Is(err, ErrNoNewPrivs):
		return "ErrNoNewPrivs"
	}
	return "error:" + err.Error()
}

// sys makes a raw syscall.
func sys(nr uintptr, args ...uintptr) (uintptr, error) {
	var a [6]uintptr
	copy(a[:], args)
	r, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

// closing closes the descriptor a successful syscall returned.
func closing(fd uintptr, err error) error {
	if err == nil {
		_ = unix.Close(int(fd))
	}
	return err
}

// ignoreResult keeps only the error of a syscall.
func ignoreResult(_ uintptr, err error) error { return err }

// bytePtr returns a NUL-terminated copy of s for a syscall. The bytes
// are heap-allocated and stay reachable from the uintptr only as long as
// the call lasts; Go's collector does not move heap objects.
func bytePtr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// neg converts a negative int (pid -1, AT_FDCWD) to a syscall argument.
func neg(v int) uintptr { return uintptr(v) }

// socketPair calls socketpair(domain, typ, 0, fds) and closes the result.
func socketPair(domain, typ uintptr) error {
	var fds [2]int32
	_, err := sys(unix.SYS_SOCKETPAIR, domain, typ, 0, uintptr(unsafe.Pointer(&fds)))
	if err == nil {
		_ = unix.Close(int(fds[0]))
		_ = unix.Close(int(fds[1]))
	}
	return err
}

// probes are the syscalls the child can try. Arguments are chosen so
// that, should the filter let a call through, the kernel refuses it
// harmlessly (bad descriptor, bad flags, missing path) or it does nothing
// lasting.
func probes() map[string]func() error {
	const nonexistent = "/nonexistent/soda-seccomp-probe"
	ps := map[string]func() error{
		// Namespaces and mounts.
		"unshare_newuser": func() error { return ignoreResult(sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)) },
		"setns":           func() error { return ignoreResult(sys(unix.SYS_SETNS, neg(-1), unix.CLONE_NEWNET)) },
		// CLONE_NEWUSER|CLONE_FS is invalid: the kernel says EINVAL
		// without creating anything; the filter answers EPERM first.
		"clone_newuser": func() error {
			return ignoreResult(sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS|uintptr(unix.SIGCHLD)))
		},
		// CLONE_THREAD without CLONE_SIGHAND is invalid: EINVAL proves
		// that clone itself reaches the kernel.
		"clone_plain": func() error { return ignoreResult(sys(unix.SYS_CLONE, unix.CLONE_THREAD)) },
		"clone3":      func() error { return ignoreResult(sys(unix.SYS_CLONE3, 0, 0)) },
		"mount": func() error {
			return ignoreResult(sys(unix.SYS_MOUNT, bytePtr("none"), bytePtr(nonexistent), bytePtr("tmpfs"), 0, 0))
		},
		"umount2": func() error { return ignoreResult(sys(unix.SYS_UMOUNT2, bytePtr(nonexistent), 0)) },
		"chroot":  func() error { return ignoreResult(sys(unix.SYS_CHROOT, bytePtr(nonexistent))) },
		"pivot_root": func() error {
			return ignoreResult(sys(unix.SYS_PIVOT_ROOT, bytePtr(nonexistent), bytePtr(nonexistent)))
		},
		"fsopen":    func() error { return closing(sys(unix.SYS_FSOPEN, bytePtr("soda-nofs"), 0)) },
		"open_tree": func() error { return closing(sys(unix.SYS_OPEN_TREE, neg(-1), bytePtr(nonexistent), 0)) },
		"open_tree_attr": func() error {
			return closing(sys(unix.SYS_OPEN_TREE_ATTR, neg(-1), bytePtr(nonexistent), 0, 0, 0))
		},
		"mount_setattr": func() error {
			return ignoreResult(sys(unix.SYS_MOUNT_SETATTR, neg(-1), bytePtr(nonexistent), 0, 0, 0))
		},

		// Other processes.
		"ptrace_traceme":    func() error { return ignoreResult(sys(unix.SYS_PTRACE, unix.PTRACE_TRACEME)) },
		"process_vm_readv":  func() error { return ignoreResult(sys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0)) },
		"pidfd_getfd":       func() error { return closing(sys(unix.SYS_PIDFD_GETFD, neg(-1), 0, 0)) },
		"pidfd_send_signal": func() error { return ignoreResult(sys(unix.SYS_PIDFD_SEND_SIGNAL, neg(-1), 0, 0, 0)) },
		"process_madvise":   func() error { return ignoreResult(sys(unix.SYS_PROCESS_MADVISE, neg(-1), 0, 0, 0, 0)) },
		"kcmp": func() error {
			return ignoreResult(sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 0 /* KCMP_FILE */, 0, 0))
		},
		"kill_all":      func() error { return ignoreResult(sys(unix.SYS_KILL, neg(-1), 0)) },
		"kill_self":     func() error { return ignoreResult(sys(unix.SYS_KILL, uintptr(os.Getpid()), 0)) },
		"kill_pgrp":     func() error { return ignoreResult(sys(unix.SYS_KILL, 0, 0)) },
		"tkill_self":    func() error { return ignoreResult(sys(unix.SYS_TKILL, uintptr(unix.Gettid()), 0)) },
		"migrate_pages": func() error { return ignoreResult(sys(unix.SYS_MIGRATE_PAGES, 0, 0, 0, 0)) },
		"move_pages":    func() error { return ignoreResult(sys(unix.SYS_MOVE_PAGES, 0, 0, 0, 0, 0, 0)) },

		// Kernel surface.
		"io_uring_setup":  func() error { return closing(sys(unix.SYS_IO_URING_SETUP, 1, 0)) },
		"memfd_create":    func() error { return closing(sys(unix.SYS_MEMFD_CREATE, bytePtr("soda"), 0)) },
		"memfd_secret":    func() error { return closing(sys(unix.SYS_MEMFD_SECRET, 0)) },
		"userfaultfd":     func() error { return closing(sys(unix.SYS_USERFAULTFD, unix.O_CLOEXEC)) },
		"bpf":             func() error { return closing(sys(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, 0, 0)) },
		"perf_event_open": func() error { return closing(sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg(-1), neg(-1), 0)) },
		"keyctl": func() error {
			return ignoreResult(sys(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, neg(unix.KEY_SPEC_SESSION_KEYRING), 0))
		},
		"add_key":          func() error { return ignoreResult(sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)) },
		"lsm_list_modules": func() error { return ignoreResult(sys(unix.SYS_LSM_LIST_MODULES, 0, 0, 0)) },
		"fanotify_init":    func() error { return closing(sys(unix.SYS_FANOTIFY_INIT, 0xffffffff, 0)) },
		"name_to_handle_at": func() error {
			return ignoreResult(sys(unix.SYS_NAME_TO_HANDLE_AT, neg(unix.AT_FDCWD), bytePtr("/"), 0, 0, 0))
		},
		"open_by_handle_at": func() error { return closing(sys(unix.SYS_OPEN_BY_HANDLE_AT, neg(-1), 0, 0)) },
		"quotactl_fd":       func() error { return ignoreResult(sys(unix.SYS_QUOTACTL_FD, neg(-1), 0, 0, 0)) },
		// Bad flags: even a root caller would only get EINVAL.
		"kexec_load":    func() error { return ignoreResult(sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xffffffff)) },
		"finit_module":  func() error { return ignoreResult(sys(unix.SYS_FINIT_MODULE, neg(-1), 0, 0xffffffff)) },
		"delete_module": func() error { return ignoreResult(sys(unix.SYS_DELETE_MODULE, 0, 0)) },
		"reboot":        func() error { return ignoreResult(sys(unix.SYS_REBOOT, 0, 0, 0, 0)) },
		"swapon":        func() error { return ignoreResult(sys(unix.SYS_SWAPON, bytePtr(nonexistent), 0)) },
		"acct":          func() error { return ignoreResult(sys(unix.SYS_ACCT, bytePtr(nonexistent))) },
		"syslog":        func() error { return ignoreResult(sys(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0)) },
		"clock_settime": func() error { return ignoreResult(sys(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, 0)) },
		"adjtimex":      func() error { return ignoreResult(sys(unix.SYS_ADJTIMEX, 0)) },

		// Argument rules.
		"ioctl_tiocsti": func() error {
			c := byte('x')
			return ignoreResult(sys(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))))
		},
		"ioctl_tiocsti_high": func() error {
			c := byte('x')
			return ignoreResult(sys(unix.SYS_IOCTL, 0, 1<<32|unix.TIOCSTI, uintptr(unsafe.Pointer(&c))))
		},
		"ioctl_tioclinux": func() error {
			c := byte(0)
			return ignoreResult(sys(unix.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c))))
		},
		"ioctl_tioccons": func() error { return ignoreResult(sys(unix.SYS_IOCTL, 0, unix.TIOCCONS)) },
		"ioctl_tiocgwinsz": func() error {
			var ws unix.Winsize
			return ignoreResult(sys(unix.SYS_IOCTL, 0, unix.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))))
		},
		"socket_inet_stream_cloexec": func() error {
			return closing(sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0))
		},
		"socket_inet6_dgram_nonblock": func() error {
			return closing(sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0))
		},
		"socket_inet_raw": func() error {
			return closing(sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP))
		},
		"socket_unix": func() error {
			return closing(sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0))
		},
		"socket_netlink": func() error { return closing(sys(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)) },
		"socket_vsock":   func() error { return closing(sys(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)) },
		"socket_packet":  func() error { return closing(sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0)) },
		"socket_alg":     func() error { return closing(sys(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)) },
		"socketpair_unix": func() error {
			return socketPair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC)
		},
		"socketpair_inet":          func() error { return socketPair(unix.AF_INET, unix.SOCK_STREAM) },
		"personality_query":        func() error { return ignoreResult(sys(unix.SYS_PERSONALITY, 0xffffffff)) },
		"personality_linux":        func() error { return ignoreResult(sys(unix.SYS_PERSONALITY, 0)) },
		"personality_no_randomize": func() error { return ignoreResult(sys(unix.SYS_PERSONALITY, addrNoRandomize)) },
		"execveat_empty_path": func() error {
			return ignoreResult(sys(unix.SYS_EXECVEAT, neg(-1), bytePtr(""), 0, 0, unix.AT_EMPTY_PATH))
		},
		"execveat_path":             func() error { return ignoreResult(sys(unix.SYS_EXECVEAT, neg(-1), bytePtr(""), 0, 0, 0)) },
		"prctl_set_mm":              func() error { return ignoreResult(sys(unix.SYS_PRCTL, unix.PR_SET_MM, 0xff, 0, 0, 1)) },
		"prctl_get_dumpable":        func() error { return ignoreResult(sys(unix.SYS_PRCTL, unix.PR_GET_DUMPABLE)) },
		"seccomp_get_action_avail":  seccompActionAvail,
		"landlock_create_ruleset_v": landlockVersion,
	}
	for name, p := range archProbes() {
		ps[name] = p
	}
	return ps
}

// seccompActionAvail asks seccomp(2) itself, which stays allowed.
func seccompActionAvail() error {
	action := uint32(unix.SECCOMP_RET_KILL_PROCESS)
	return ignoreResult(sys(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))))
}

// landlockVersion asks for the Landlock ABI version, which stays allowed.
func landlockVersion() error {
	return ignoreResult(sys(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION))
}

// childRun is one execution of the child.
type childRun struct {
	stdout, stderr string
	state          *os.ProcessState
}

// result returns the child's result line.
func (r childRun) result() string {
	for _, line := range strings.Split(r.stdout, "\n") {
		if v, ok := strings.CutPrefix(line, resultTag); ok {
			return v
		}
	}
	return ""
}

// runChild re-executes the test binary for probe.
func runChild(t *testing.T, probe string, filter bool, dir string, args ...string) childRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// os.Args[0] may be relative ("./seccomp.test"), and cmd.Dir moves.
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("locate the test binary: %v", err)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), childEnv+"="+probe)
	if !filter {
		cmd.Env = append(cmd.Env, noFilterEnv+"=1")
	}
	if dir != "" {
		cmd.Env = append(cmd.Env, "HOME="+dir, "TMPDIR="+dir)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr // stdin is /dev/null: not a tty
	err = cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run child %s: %v", probe, err)
	}
	return childRun{stdout: stdout.String(), stderr: stderr.String(), state: cmd.ProcessState}
}

// killedBySIGSYS reports whether the child died from a seccomp kill.
func killedBySIGSYS(state *os.ProcessState) bool {
	ws, ok := state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == unix.SIGSYS
}

// probeCase is one probe run by TestKernelProbes.
type probeCase struct {
	probe string
	want  []string // accepted results under the filter
	// control lists the accepted results without the filter, to show
	// that the filter, not the kernel, gave the answer; nil skips the
	// control run (where the unfiltered answer depends on privileges or
	// kernel configuration).
	control []string
}

func TestKernelProbes(t *testing.T) {
	if err := Available(); err != nil {
		t.Fatalf("kernel cannot run the probes: %v", err)
	}
	tests := []probeCase{
		{"unshare_newuser", []string{"EPERM"}, []string{"EINVAL"}},
		{"setns", []string{"EPERM"}, []string{"EBADF"}},
		{"clone_newuser", []string{"EPERM"}, []string{"EINVAL"}},
		{"clone_plain", []string{"EINVAL"}, []string{"EINVAL"}},
		{"clone3", []string{"ENOSYS"}, []string{"EINVAL"}},
		{"mount", []string{"EPERM"}, nil},
		{"umount2", []string{"EPERM"}, nil},
		{"chroot", []string{"EPERM"}, nil},
		{"pivot_root", []string{"EPERM"}, nil},
		{"fsopen", []string{"EPERM"}, nil},
		{"open_tree", []string{"EPERM"}, nil},
		{"open_tree_attr", []string{"EPERM"}, nil},
		{"mount_setattr", []string{"EPERM"}, nil},
		{"ptrace_traceme", []string{"EPERM"}, nil},
		{"process_vm_readv", []string{"EPERM"}, []string{"OK"}},
		{"pidfd_getfd", []string{"EPERM"}, []string{"EBADF"}},
		{"pidfd_send_signal", []string{"EPERM"}, []string{"EBADF"}},
		{"process_madvise", []string{"EPERM"}, []string{"EBADF"}},
		{"kcmp", []string{"EPERM"}, nil},
		{"kill_all", []string{"EPERM"}, nil},
		{"kill_self", []string{"OK"}, []string{"OK"}},
		{"kill_pgrp", []string{"OK"}, []string{"OK"}},
		{"tkill_self", []string{"OK"}, []string{"OK"}},
		{"migrate_pages", []string{"EPERM"}, nil},
		{"move_pages", []string{"EPERM"}, nil},
		{"io_uring_setup", []string{"ENOSYS"}, nil},
		{"memfd_create", []string{"EPERM"}, []string{"OK"}},
		{"memfd_secret", []string{"EPERM"}, nil},
		{"userfaultfd", []string{"EPERM"}, nil},
		{"bpf", []string{"EPERM"}, nil},
		{"perf_event_open", []string{"EPERM"}, nil},
		{"keyctl", []string{"EPERM"}, nil},
		{"add_key", []string{"EPERM"}, []string{"EFAULT"}},
		{"lsm_list_modules", []string{"EPERM"}, nil},
		{"fanotify_init", []string{"EPERM"}, nil},
		{"name_to_handle_at", []string{"EPERM"}, []string{"EFAULT"}},
		{"open_by_handle_at", []string{"EPERM"}, nil},
		{"quotactl_fd", []string{"EPERM"}, []string{"EBADF"}},
		{"kexec_load", []string{"EPERM"}, nil},
		{"finit_module", []string{"EPERM"}, nil},
		{"delete_module", []string{"EPERM"}, nil},
		{"reboot", []string{"EPERM"}, nil},
		{"swapon", []string{"EPERM"}, nil},
		{"acct", []string{"EPERM"}, nil},
		{"syslog", []string{"EPERM"}, nil},
		{"clock_settime", []string{"EPERM"}, []string{"EFAULT"}},
		{"adjtimex", []string{"EPERM"}, []string{"EFAULT"}},
		{"ioctl_tiocsti", []string{"EPERM"}, []string{"ENOTTY"}},
		{"ioctl_tiocsti_high", []string{"EPERM"}, []string{"ENOTTY"}},
		{"ioctl_tioclinux", []string{"EPERM"}, []string{"ENOTTY"}},
		{"ioctl_tioccons", []string{"EPERM"}, nil},
		{"ioctl_tiocgwinsz", []string{"ENOTTY"}, []string{"ENOTTY"}},
		{"socket_inet_stream_cloexec", []string{"OK"}, []string{"OK"}},
		{"socket_inet6_dgram_nonblock", []string{"OK", "EAFNOSUPPORT"}, nil},
		{"socket_inet_raw", []string{"EPERM"}, nil},
		{"socket_unix", []string{"EPERM"}, []string{"OK"}},
		{"socket_netlink", []string{"EPERM"}, []string{"OK"}},
		{"socket_vsock", []string{"EPERM"}, nil},
		{"socket_packet", []string{"EPERM"}, nil},
		{"socket_alg", []string{"EPERM"}, nil},
		{"socketpair_unix", []string{"OK"}, []string{"OK"}},
		{"socketpair_inet", []string{"EPERM"}, []string{"ENOTSUP"}}, // EOPNOTSUPP == ENOTSUP on Linux
		{"personality_query", []string{"OK"}, []string{"OK"}},
		{"personality_linux", []string{"OK"}, []string{"OK"}},
		{"personality_no_randomize", []string{"EPERM"}, []string{"OK"}},
		{"execveat_empty_path", []string{"EPERM"}, []string{"EBADF"}},
		{"execveat_path", []string{"ENOENT"}, []string{"ENOENT"}},
		{"prctl_set_mm", []string{"EPERM"}, []string{"EINVAL"}},
		{"prctl_get_dumpable", []string{"OK"}, []string{"OK"}},
		{"seccomp_get_action_avail", []string{"OK"}, []string{"OK"}},
		{"landlock_create_ruleset_v", []string{"OK", "ENOTSUP"}, nil},
	}
	tests = append(tests, archProbeCases()...)
	known := probes()
	for _, tc := range tests {
		t.Run(tc.probe, func(t *testing.T) {
			t.Parallel()
			if known[tc.probe] == nil {
				t.Fatalf("no probe %q", tc.probe)
			}
			r := runChild(t, tc.probe, true, "")
			if got := r.result(); !slices.Contains(tc.want, got) {
				t.Errorf("filtered: got %q, want one of %q (state %v, stderr %q)", got, tc.want, r.state, r.stderr)
			}
			if tc.control == nil {
				return
			}
			r = runChild(t, tc.probe, false, "")
			if got := r.result(); !slices.Contains(tc.control, got) {
				t.Errorf("control (no filter): got %q, want one of %q (stderr %q)", got, tc.control, r.stderr)
			}
		})
	}
}

func TestInstallRequiresNoNewPrivs(t *testing.T) {
	r := runChild(t, probeNoNNP, true, "")
	switch got := r.result(); got {
	case "ErrNoNewPrivs":
		if !strings.Contains(r.stdout, "no_new_privs") || !strings.Contains(r.stdout, "install seccomp filter") {
			t.Errorf("error text lacks context: %q", r.stdout)
		}
	case "inherited-nnp":
		t.Skip("this test process already runs with no_new_privs, so the child inherits it")
	default:
		t.Fatalf("Install without no_new_privs: got %q, want ErrNoNewPrivs (stderr %q)", got, r.stderr)
	}
}

func TestInstallSyncsThreads(t *testing.T) {
	r := runChild(t, probeTSYNC, true, "")
	got := r.result()
	// no_new_privs and seccomp mode 2 (filter), in /proc order, on a thread that existed
	// before Install and never called it.
	if got != "EPERM NoNewPrivs:1 Seccomp:2" {
		t.Fatalf("other thread after Install: got %q, want %q (stderr %q)", got, "EPERM NoNewPrivs:1 Seccomp:2", r.stderr)
	}
}

// lookTool finds a tool the agent must be able to run.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH (%v): install %s", name, err, pkg)
	}
	return path
}

func TestToolsUnderFilter(t *testing.T) {
	tests := []struct {
		name  string
		argv  func(t *testing.T, dir string) []string
		want  string                                 // expected stdout, trimmed; "" accepts any
		check func(t *testing.T, dir, stdout string) // optional side-effect check
	}{
		{name: "sh", argv: func(t *testing.T, _ string) []string {
			return []string{lookTool(t, "sh", "dash"), "-c", "echo ok"}
		}, want: "ok"},
		{name: "bash and coreutils", argv: func(t *testing.T, _ string) []string {
			return []string{lookTool(t, "bash", "bash"), "-c",
				`set -eo pipefail; echo abc | tr a-c x-z | grep -q xyz; sleep 0.1 & wait $!; ` +
					`kill -0 $$; f=$(mktemp); seq 3 >"$f"; sort -r "$f" | head -n 1; rm "$f"`}
		}, want: "3"},
		{name: "python3", argv: func(t *testing.T, _ string) []string {
			return []string{lookTool(t, "python3", "python3"), "-c",
				"import os,subprocess; print(subprocess.run(['true']).returncode)"}
		}, want: "0"},
		{name: "node", argv: func(t *testing.T, dir string) []string {
			node, err := exec.LookPath("node")
			if err != nil {
				t.Skipf("node not found in PATH (%v): install nodejs (20.x) to run this test", err)
			}
			// The brief's probe, writing into the test's directory
			// instead of /tmp.
			return []string{node, "-e", "require('child_process').execSync('true'); " +
				"require('fs').writeFileSync(" + jsQuote(filepath.Join(dir, "x-")) + "+process.pid,'a'); " +
				"console.log('ok')"}
		}, want: "ok", check: func(t *testing.T, dir, _ string) {
			files, err := filepath.Glob(filepath.Join(dir, "x-*"))
			if err != nil || len(files) != 1 {
				t.Fatalf("files written by node: %q, %v", files, err)
			}
			if data, err := os.ReadFile(files[0]); err != nil || string(data) != "a" {
				t.Errorf("%s holds %q, %v; want \"a\"", files[0], data, err)
			}
		}},
		{name: "npm", argv: func(t *testing.T, _ string) []string {
			npm, err := exec.LookPath("npm")
			if err != nil {
				t.Skipf("npm not found in PATH (%v): install npm to run this test", err)
			}
			return []string{npm, "--version", "--no-update-notifier"}
		}},
		{name: "git", argv: func(t *testing.T, _ string) []string {
			git := lookTool(t, "git", "git")
			return []string{lookTool(t, "sh", "dash"), "-c", `set -e
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=soda GIT_AUTHOR_EMAIL=soda@localhost
export GIT_COMMITTER_NAME=soda GIT_COMMITTER_EMAIL=soda@localhost
g=` + git + `
$g init -q -b main repo
cd repo
echo hello >a.txt
$g add a.txt
$g commit -qm first
echo world >>a.txt
$g commit -qam second
$g log --oneline | wc -l`}
		}, want: "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			argv := tc.argv(t, dir)
			r := runChild(t, probeExec, true, dir, argv...)
			if !r.state.Success() {
				t.Fatalf("%q under the filter: %v\nstdout: %s\nstderr: %s", argv, r.state, r.stdout, r.stderr)
			}
			out := strings.TrimSpace(r.stdout)
			if tc.want != "" && out != tc.want {
				t.Errorf("%q under the filter printed %q, want %q (stderr %q)", argv, out, tc.want, r.stderr)
			}
			if tc.check != nil {
				tc.check(t, dir, out)
			}
			t.Logf("%s: %q", tc.name, out)
		})
	}
}

// jsQuote quotes s as a JavaScript string literal.
func jsQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
