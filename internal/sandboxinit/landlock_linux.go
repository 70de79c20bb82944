package sandboxinit

import (
	"errors"
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// applyLandlock restricts the calling process (all its threads) and its
// future children:
//
//   - the whole sandbox root: read and execute (the mount namespace already
//     decides what exists and what is read-only);
//   - the home, /tmp, /var/tmp, /dev/shm and the read-write grants: full
//     access, cross-directory rename and link included (Refer), execute
//     only outside the noexec tmpfs mounts;
//   - /dev: ioctl on devices (terminals);
//   - scopes: no signal to, and no abstract Unix socket of, any process
//     outside this Landlock domain (init, the host).
//
// It refuses to run below cfg.LandlockMin (the ABI that brings the scopes
// is 6) and returns the ABI in force.
func applyLandlock(cfg *config) (int, error) {
	if unavailable(cfg, wire.LayerLandlock) {
		return 0, errors.New("unavailable (test knob)")
	}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("kernel has no Landlock (enable CONFIG_SECURITY_LANDLOCK and lsm=landlock): %w", err)
	}
	if abi < cfg.LandlockMin {
		return abi, fmt.Errorf("kernel Landlock ABI %d is below the required %d", abi, cfg.LandlockMin)
	}
	// Handle every filesystem right the kernel knows (up to V7 here) and
	// both scopes; no network rules (the network namespace does that).
	llcfg := landlock.Config{
		HandledAccessFS: landlock.V7.HandledAccessFS,
		Scoped:          landlock.ScopedSet(llsys.ScopeSignal | llsys.ScopeAbstractUnixSocket),
	}
	writable := []string{wire.SandboxHome, "/tmp", "/var/tmp", "/dev/shm"}
	if cfg.WorkspaceSize > 0 {
		writable = append(writable, wire.SandboxWorkspace)
	}
	writable = append(writable, cfg.ReadWrite...)
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs(writable...).WithRefer().IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom").WithIoctlDev().IgnoreIfMissing(),
		landlock.RWDirs("/dev/pts").WithIoctlDev().IgnoreIfMissing(),
	}
	// BestEffort only drops rights the running kernel does not know; the
	// ABI floor above is what makes a weaker sandbox fail.
	if err := llcfg.BestEffort().Restrict(rules...); err != nil {
		return abi, fmt.Errorf("landlock restrict: %w", err)
	}
	return abi, nil
}
