package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/seccomp"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// confine applies the per-process layers to init itself, all of which the
// command inherits when init forks it: no capabilities in the bounding
// set, the sandbox's uid, no_new_privs, Landlock, rlimits, close-on-exec
// on every descriptor but stdio, no capabilities at all, and seccomp last
// (nothing above needs a syscall it denies). It must run on the thread
// that will fork the command (runtime.LockOSThread). The rlimits: no core
// dumps, NOFILE and FSIZE as asked, NPROC at the task limit (the kernel
// checks it before a fork copies anything, unlike the cgroup's pids
// limit; nprocLimit), MSGQUEUE at the kernel's default (ipc_linux.go). Every layer is
// required unless degraded; on error it returns the failing layer.
func confine(cfg *config, report func(wire.Status)) (wire.Layer, error) {
	if err := dropBoundingSet(); err != nil {
		return "", err
	}
	if err := becomeSandboxUser(cfg); err != nil {
		return "", err
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("no_new_privs: %w", err)
	}

	abi, err := applyLandlock(cfg)
	switch {
	case err != nil && degraded(cfg, wire.LayerLandlock):
		report(wire.Status{Layer: wire.LayerLandlock, State: "degraded", Detail: err.Error()})
	case err != nil:
		return wire.LayerLandlock, err
	default:
		report(wire.Status{Layer: wire.LayerLandlock, State: "applied", Detail: fmt.Sprintf("ABI %d: filesystem rules, signal and abstract-socket scopes", abi)})
	}

	for _, rl := range []struct {
		res int
		val uint64
	}{
		{unix.RLIMIT_CORE, 0},
		{unix.RLIMIT_NOFILE, cfg.NoFile},
		{unix.RLIMIT_FSIZE, cfg.FileSize},
		{unix.RLIMIT_NPROC, nprocLimit(cfg)},
		{unix.RLIMIT_MSGQUEUE, msgQueueBytes},
	} {
		if rl.val == 0 && rl.res != unix.RLIMIT_CORE {
			continue
		}
		if err := unix.Setrlimit(rl.res, &unix.Rlimit{Cur: rl.val, Max: rl.val}); err != nil {
			return "", fmt.Errorf("setrlimit %d: %w", rl.res, err)
		}
	}

	// Only stdin, stdout and stderr cross the exec of the command.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return "", fmt.Errorf("close_range: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return "", err
	}

	if unavailable(cfg, wire.LayerSeccomp) {
		err = errors.New("unavailable (test knob)")
	} else if err = seccomp.Available(); err == nil {
		err = seccomp.Install()
	}
	switch {
	case err != nil && degraded(cfg, wire.LayerSeccomp):
		report(wire.Status{Layer: wire.LayerSeccomp, State: "degraded", Detail: err.Error()})
	case err != nil:
		return wire.LayerSeccomp, err
	default:
		report(wire.Status{Layer: wire.LayerSeccomp, State: "applied", Detail: "syscall filter (EPERM/ENOSYS), foreign architectures killed"})
	}
	return "", nil
}

// guardSlack is how many more threads than it has when init confines
// itself the repository guard may start (its Go runtime adds one for a
// blocking system call) before the cgroup's task limit, not the rlimit,
// refuses the command's forks. It is cgroup.TasksPeakSlack too: a cgroup
// whose tasks peaked that close to its limit met the rlimit
// (limitCounters).
const guardSlack = 8

// nprocLimit is the command's RLIMIT_NPROC: the task limit, cfg.NProc,
// which the cgroup's pids.max also is. The rlimit must refuse first: the
// pids controller refuses a fork only after it copied the parent's memory
// map under the parent's mmap lock, and a fork bomb held there makes the
// host's ps wait (issue 23). Both count the same tasks, but for the
// repository guard of a root caller's sandbox, which runs as root in the
// cgroup: the rlimit leaves room for its threads, and guardSlack more
// (without it, a fork bomb at --tasks 100 met the pids limit 2122 times in
// 3 s, and the rlimit never). At least half the task limit is left.
func nprocLimit(cfg *config) uint64 {
	n := cfg.NProc
	if n == 0 || cfg.UserNS || cfg.guard == nil {
		return n
	}
	reserve := uint64(threads(cfg.guard.pid)) + guardSlack
	return max(n-min(reserve, n), n/2)
}

// threads is how many threads process pid has (0 if it is gone).
func threads(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// lookPath finds argv0 in the sandbox's PATH (from env), as the shell
// would. Its error is a *commandError with the shell's status: 127 when
// nothing is found, 126 when what is found cannot be executed.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		fi, err := os.Stat(argv0)
		switch {
		case err != nil:
			return "", &commandError{Code: 127, Err: fmt.Errorf("command %s: %w", argv0, err)}
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			return "", &commandError{Code: 126, Err: fmt.Errorf("command %s: not an executable file", argv0)}
		}
		return argv0, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		p := filepath.Join(dir, argv0)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &commandError{Code: 127, Err: fmt.Errorf("command %s not found in the sandbox (PATH=%s)", argv0, pathEnv)}
}

// commandError says that the sandbox was built but its command could not
// be started. Code is the exit status a shell would give (126, 127).
type commandError struct {
	Code int
	Err  error
}

func (e *commandError) Error() string { return e.Err.Error() }

func (e *commandError) Unwrap() error { return e.Err }
