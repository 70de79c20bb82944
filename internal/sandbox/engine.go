package sandbox

import (
	"log/slog"
	"os"

	"github.com/soda-project/soda/internal/egress"
)

// CgroupManager says who makes each sandbox's cgroup.
type CgroupManager string

const (
	// CgroupSystemd asks the service manager for a transient scope per
	// sandbox: the system manager for a privileged engine, the caller's own
	// user manager otherwise.
	CgroupSystemd CgroupManager = "systemd"
	// CgroupDirect has the engine make the cgroup itself: a cgroup v2
	// directory below its own when that enforces the limits, else, for a
	// privileged engine, directories in the cgroup v1 memory, pids and cpu
	// hierarchies (hybrid hosts: WSL2, older distributions).
	CgroupDirect CgroupManager = "direct"
)

// UIDRange is the range of dedicated uids a privileged engine runs its
// sandboxes as, one per running sandbox, each held by a lock file in
// LockDir (shared by every engine on the host that uses the same range).
type UIDRange struct {
	First   int    // the first uid
	Count   int    // how many
	LockDir string // a root-only directory for the lock files
}

// DefaultUIDs is the range sodactl and sodad share.
var DefaultUIDs = UIDRange{First: UIDBase, Count: UIDCount, LockDir: uidLockDir}

// Config is what a Linux engine is built from. Nothing in it is guessed
// from the running process: Detect fills it from the host for callers
// that want that, and New checks it.
type Config struct {
	// InitPath is the sandbox's init binary (soda-sandbox-init), executed
	// as each sandbox's PID 1.
	InitPath string
	// Log receives the engine's log lines (nil: discarded).
	Log *slog.Logger
	// Audit receives every audit record of every sandbox (nil: log only).
	Audit func(Record)
	// QuietEgress logs each egress attempt at debug level, refusals
	// included (otherwise warnings), for a caller that reports them
	// itself: sodactl run sums the refusals up once the command has
	// ended. Audit gets every attempt all the same.
	QuietEgress bool
	// Resolver is used by the egress proxies (nil: the system resolver).
	Resolver egress.Resolver
	// Privileged runs each sandbox as a dedicated uid from UIDs, without
	// a user namespace; it needs root. Unprivileged engines run the
	// caller's own uid in a user namespace; root must be privileged.
	Privileged bool
	// Cgroups says who makes the sandboxes' cgroups.
	Cgroups CgroupManager
	// UIDs is a privileged engine's uid range (zero: DefaultUIDs).
	UIDs UIDRange
	// ClosedNetwork makes the engine refuse every spec that is not
	// Spec.NoNetwork: a validation worker's engine never relays egress.
	ClosedNetwork bool
	// Adoptable lets the engine's sandboxes outlive it, to be handed to a
	// successor (Sandbox.Handover, Linux.Adopt; see adopt_linux.go): their
	// init has no parent-death signal and ends when its life socket's
	// host end is closed everywhere. It needs systemd scopes.
	Adoptable bool
}

// Detect returns the configuration for this host and process: privileged
// when running as root, systemd scopes when systemd is the service manager
// (sd_booted(3)), the default uid range. The caller sets InitPath, Log,
// Audit and Resolver.
func Detect() Config {
	cfg := Config{Privileged: os.Geteuid() == 0, Cgroups: CgroupDirect, UIDs: DefaultUIDs}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		cfg.Cgroups = CgroupSystemd
	}
	return cfg
}

// Dedicated uids for sandboxes started by root. Each running sandbox holds
// one uid of the range, locked with flock(2) on a file in uidLockDir, so
// that two sandboxes never share a uid (one cannot signal, trace or read
// the other's files, or reach its sockets by peer credentials). The range
// sits far above login and system users and systemd's DynamicUser range
// (61184–65519), below 2^31 so that no tool reads it as negative.
const (
	UIDBase    = 2147000000
	UIDCount   = 10000
	uidLockDir = "/run/soda/sandbox/uids"
)
