package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"time"
)

// The sandbox's init is the soda binary itself, re-executed:
//
//	host (sodactl) ──clone(new ns)──▶ init (PID 1 of the sandbox: builds it,
//	                                   confines itself, forks the command,
//	                                   relays egress, reaps)
//
// It is recognised by two markers together, argv[0] and an environment
// variable, so that neither alone (an inherited variable, a renamed
// binary) turns a process into one. The host sends init its configuration
// as one JSON line on a pipe, then placedByte; init reports progress as
// JSON lines on another pipe.
const (
	initArg0  = "soda-sandbox-init"
	markerEnv = "SODA_SANDBOX_ROLE"
	fdsEnv    = "SODA_SANDBOX_FDS" // cfg,status,egress[,userns…][,exec] fd numbers
	// placedByte follows the configuration on the config pipe once the
	// host has placed init in the sandbox's cgroup: init forks the command
	// only after reading it.
	placedByte = 'P'
)

// initConfig is what init needs: the spec, resolved by the host.
type initConfig struct {
	ID        string   `json:"id"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Dir       string   `json:"dir"`
	ReadOnly  []string `json:"ro"`
	ReadWrite []string `json:"rw"`
	Home      string   `json:"home"`
	// UID and GID the command runs as (root callers: a dedicated uid).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// UserNS is true when init runs in a new user namespace (non-root).
	UserNS bool `json:"userns"`
	// IDMaps gives, per granted path, the index of the user namespace fd
	// (after cfg,status,egress) to idmap it with; -1 or absent: no idmap.
	IDMaps map[string]int `json:"idmaps,omitempty"`
	// Identities holds the device and inode each granted path (and the
	// home) had when the host checked it; init mounts a path only if it
	// still reaches that directory without following a symlink.
	Identities  map[string][2]uint64 `json:"ids"`
	RelayPorts  []uint16             `json:"relay_ports"`
	DNS         bool                 `json:"dns"`
	NoNetwork   bool                 `json:"no_network,omitempty"` // Spec.NoNetwork (netmode.go)
	TmpSize     int64                `json:"tmp_size"`
	HomeSize    int64                `json:"home_size"`
	NoFile      uint64               `json:"nofile"`
	FileSize    uint64               `json:"fsize"`
	LandlockMin int                  `json:"landlock_min_abi"`
	Degraded    []Layer              `json:"degraded,omitempty"`
	Unavailable []Layer              `json:"unavailable,omitempty"`
	HideExtra   []string             `json:"hide_extra,omitempty"`
	StdinIsTTY  bool                 `json:"stdin_tty"`
	// Unprotect lists paths the caller left writable although they are
	// protected (see protect.go).
	Unprotect []string `json:"unprotect,omitempty"`
	// Persistent: init runs no command of its own but serves exec
	// requests on the last descriptor of SODA_SANDBOX_FDS (exec.go).
	Persistent bool `json:"persistent,omitempty"`

	idmapDegraded []string      // read-write grants mounted without idmap (init only)
	idmapSkipped  []string      // read-only grants whose filesystem cannot idmap
	cgroupLayout  *cgroupLayout // how the host mounts /sys/fs/cgroup (init only)
	protected     []string      // paths made read-only by protectGrants (init only)
	guard         *repoGuard    // the repository guard, if any (init only; newrepo.go)
	unprotected   []string      // protected paths left writable by Unprotect (init only)
}

// statusMsg is one line init writes on the status pipe.
type statusMsg struct {
	Layer  Layer  `json:"layer,omitempty"`
	State  string `json:"state,omitempty"` // applied, degraded
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"` // fatal: init exits
	Code   int    `json:"code,omitempty"`  // with Error: the command could not start (126, 127)
	Ready  bool   `json:"ready,omitempty"` // the command has been started
	Pid    int    `json:"pid,omitempty"`   // its pid inside the sandbox
	// Event, from the repository guard (newrepo.go), is an audit record
	// to make: "protected" or "refused", with Detail.
	Event string `json:"event,omitempty"`
	// Elapsed is the time since init's main started, for -v timings.
	Elapsed time.Duration `json:"elapsed,omitempty"`
}

// IsInit reports whether this process was started as a sandbox's init (or
// its idmap namespace holder); programs that start sandboxes call Main
// first thing in main.
func IsInit() bool {
	if len(os.Args) == 0 {
		return false
	}
	role := os.Getenv(markerEnv)
	return (os.Args[0] == initArg0 && role == "init") || (os.Args[0] == holdArg0 && role == "hold") ||
		(os.Args[0] == guardArg0 && role == "guard")
}

// Main runs the sandbox role of this process (see IsInit) and never returns.
func Main() {
	if os.Args[0] == holdArg0 {
		os.Exit(runHold())
	}
	if os.Args[0] == guardArg0 {
		os.Exit(runRepoGuard())
	}
	os.Exit(runInit())
}

// fdList parses SODA_SANDBOX_FDS.
func fdList() []int {
	var fds []int
	for _, f := range strings.Split(os.Getenv(fdsEnv), ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 3 {
			return nil
		}
		fds = append(fds, n)
	}
	return fds
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sbx-" + hex.EncodeToString(b[:])
}
