package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/seccomp"
)

// runStage applies the per-process layers to itself and execs the
// command: no_new_privs, Landlock, rlimits, descriptor hygiene, seccomp
// and, last, no capabilities. Every layer is required unless degraded.
func runStage() int {
	// Capabilities, the ambient set and prctl state are per thread: do it
	// all, and the exec, on one thread.
	runtime.LockOSThread()
	fds := fdList()
	if len(fds) != 2 {
		fmt.Fprintln(os.Stderr, "soda-sandbox-stage: started without its descriptors")
		return 125
	}
	status := os.NewFile(uintptr(fds[1]), "status")
	enc := json.NewEncoder(status)
	report := func(m statusMsg) { _ = enc.Encode(m) }
	fail := func(l Layer, code int, err error) int {
		report(statusMsg{Layer: l, Error: err.Error()})
		return code
	}
	var cfg initConfig
	cfgFile := os.NewFile(uintptr(fds[0]), "config")
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		return fail("", 125, fmt.Errorf("read stage configuration: %w", err))
	}
	cfgFile.Close()

	// The bounding set is dropped while the capability to do so is still
	// held (this thread execs the command), then the identity changes.
	if err := dropBoundingSet(); err != nil {
		return fail("", 125, err)
	}
	if err := becomeSandboxUser(&cfg); err != nil {
		return fail("", 125, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("", 125, fmt.Errorf("no_new_privs: %w", err))
	}
	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return fail("", 127, err)
	}
	if err := os.Chdir(cfg.Dir); err != nil {
		return fail("", 125, fmt.Errorf("working directory %s: %w", cfg.Dir, err))
	}

	abi, err := applyLandlock(&cfg)
	switch {
	case err != nil && degraded(&cfg, LayerLandlock):
		report(statusMsg{Layer: LayerLandlock, State: "degraded", Detail: err.Error()})
	case err != nil:
		return fail(LayerLandlock, 125, err)
	default:
		report(statusMsg{Layer: LayerLandlock, State: "applied", Detail: fmt.Sprintf("ABI %d: filesystem rules, signal and abstract-socket scopes", abi)})
	}

	for _, rl := range []struct {
		res int
		val uint64
	}{
		{unix.RLIMIT_CORE, 0},
		{unix.RLIMIT_NOFILE, cfg.NoFile},
		{unix.RLIMIT_FSIZE, cfg.FileSize},
	} {
		if rl.val == 0 && rl.res != unix.RLIMIT_CORE {
			continue
		}
		if err := unix.Setrlimit(rl.res, &unix.Rlimit{Cur: rl.val, Max: rl.val}); err != nil {
			return fail("", 125, fmt.Errorf("setrlimit %d: %w", rl.res, err))
		}
	}

	// Only stdin, stdout and stderr cross the exec.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail("", 125, fmt.Errorf("close_range: %w", err))
	}
	if err := dropCapabilities(); err != nil {
		return fail("", 125, err)
	}

	// seccomp last: nothing above needs a syscall it denies.
	if unavailable(&cfg, LayerSeccomp) {
		err = errors.New("unavailable (test knob)")
	} else if err = seccomp.Available(); err == nil {
		err = seccomp.Install(seccomp.Options{})
	}
	switch {
	case err != nil && degraded(&cfg, LayerSeccomp):
		report(statusMsg{Layer: LayerSeccomp, State: "degraded", Detail: err.Error()})
	case err != nil:
		return fail(LayerSeccomp, 125, err)
	default:
		report(statusMsg{Layer: LayerSeccomp, State: "applied", Detail: "syscall filter (EPERM/ENOSYS), foreign architectures killed"})
	}
	report(statusMsg{Ready: true, Pid: os.Getpid()})
	err = syscall.Exec(path, cfg.Argv, cfg.Env)
	fmt.Fprintf(os.Stderr, "sodactl: exec %s: %v\n", path, err)
	return 126
}

// lookPath finds argv0 in the sandbox's PATH (from env), as the shell would.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		if _, err := os.Stat(argv0); err != nil {
			return "", fmt.Errorf("command %s: %w", argv0, err)
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
	return "", fmt.Errorf("command %s: %w in the sandbox's PATH (%s)", argv0, exec.ErrNotFound, pathEnv)
}
