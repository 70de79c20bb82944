package sandboxinit

import (
	"io"
	"os"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// IsInit reports whether this process was started as a sandbox's init (or
// its idmap namespace holder): argv[0] and the role variable together.
func IsInit() bool {
	if len(os.Args) == 0 {
		return false
	}
	role := os.Getenv(wire.RoleEnv)
	return (os.Args[0] == wire.InitArg0 && role == wire.RoleInit) || (os.Args[0] == wire.HoldArg0 && role == wire.RoleHold) ||
		(os.Args[0] == guardArg0 && role == roleGuard)
}

// Main runs the sandbox role of this process (see IsInit) and never returns.
func Main() {
	if os.Args[0] == wire.HoldArg0 {
		os.Exit(runHold())
	}
	if os.Args[0] == guardArg0 {
		os.Exit(runRepoGuard())
	}
	os.Exit(runInit())
}

// runHold blocks until stdin is closed. The host only needs the process
// for as long as it takes to open its user namespace, and kills it then.
func runHold() int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// config is the host's configuration and what init learns while it
// builds the sandbox.
type config struct {
	wire.Config

	idmapDegraded []string      // read-write grants mounted without idmap
	idmapSkipped  []string      // read-only grants whose filesystem cannot idmap
	cgroupLayout  *cgroupLayout // how the host mounts /sys/fs/cgroup
	protected     []string      // paths made read-only by protectGrants
	unprotected   []string      // protected paths left writable by Unprotect
	masked        []string      // files shown with a mask's contents (maskFiles)
	guard         *repoGuard    // the repository guard, if any (repoguard_linux.go)
}

// grant is one granted path.
type grant struct {
	path string
	ro   bool
}

// grants lists the configuration's grants, read-only ones first.
func (c *config) grants() []grant {
	var gs []grant
	for _, p := range c.ReadOnly {
		gs = append(gs, grant{p, true})
	}
	for _, p := range c.ReadWrite {
		gs = append(gs, grant{p, false})
	}
	return gs
}
