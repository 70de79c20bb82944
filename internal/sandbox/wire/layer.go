package wire

// Layer names one confinement layer. They appear in errors, in the log and
// in the audit record, and are what --allow-degraded takes.
type Layer string

// The layers, in the order they are applied.
const (
	LayerCgroup   Layer = "cgroup"   // memory/pids/cpu limits, kill-all at teardown
	LayerUserNS   Layer = "userns"   // user namespace (unprivileged callers)
	LayerNetNS    Layer = "netns"    // network namespace with loopback only
	LayerMountNS  Layer = "mountns"  // private root: read-only system, hidden sockets
	LayerPIDNS    Layer = "pidns"    // PID namespace with a fresh /proc
	LayerIDMap    Layer = "idmap"    // idmapped mounts for granted paths (root only)
	LayerLandlock Layer = "landlock" // filesystem access, signal and socket scopes
	LayerSeccomp  Layer = "seccomp"  // syscall filter
)
