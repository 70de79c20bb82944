// Package wire is the protocol between the host side of a sandbox
// (internal/sandbox) and its PID 1, soda-sandbox-init
// (internal/sandboxinit): how the host starts init, the configuration it
// sends, the status lines init answers with, the exec messages of a live
// sandbox, and the names both sides share (layers, the sandbox's home).
// It holds no behaviour, so that init links nothing of the host.
//
//	host (sodactl, sodad) ──clone(new ns), exec soda-sandbox-init──▶ init
//	                       (PID 1 of the sandbox: builds it, confines
//	                        itself, forks the command, relays egress, reaps)
//
// Init is recognised by two markers together, argv[0] and RoleEnv, so that
// neither alone (an inherited variable, a renamed binary) turns a process
// into one. The host sends init its Config as one JSON line on a pipe,
// then PlacedByte; init reports progress as Status lines on another pipe.
package wire

import (
	"strconv"
	"strings"
	"time"
)

// How the host starts init and its idmap namespace holder.
const (
	// InitArg0 is init's argv[0], with RoleEnv=RoleInit.
	InitArg0 = "soda-sandbox-init"
	// HoldArg0 is the argv[0] of a process that only keeps a user
	// namespace alive for idmapped mounts, with RoleEnv=RoleHold.
	HoldArg0 = "soda-sandbox-hold"
	// RoleEnv names the role; RoleInit and RoleHold are its values.
	RoleEnv  = "SODA_SANDBOX_ROLE"
	RoleInit = "init"
	RoleHold = "hold"
	// FDsEnv lists init's descriptors: cfg,status,egress,life[,userns…][,exec]
	// (see ParseFDs).
	FDsEnv = "SODA_SANDBOX_FDS"
	// PlacedByte follows the configuration on the config pipe once the
	// host has placed init in the sandbox's cgroup: init forks the command
	// only after reading it.
	PlacedByte = 'P'
	// Version is the version of this protocol, sent in Config.Version:
	// init refuses a configuration of another version (a host and an init
	// binary from different builds). 5: exec's end_others and ws_full,
	// and Config.NProc.
	Version = 5
)

// GitTemplateDir is the sandbox's empty, read-only git template directory
// (GIT_TEMPLATE_DIR): git init and git clone copy no hooks there (see
// internal/sandboxinit/repoguard_linux.go).
const GitTemplateDir = "/run/soda-sandbox/git-template"

// The life socket (the fourth descriptor of FDsEnv, a SOCK_SEQPACKET
// socket pair) ties init to its supervisor. Init holds its end until it
// exits and never reads anything but the end of it: when every copy of
// the host's end is closed (the supervisor died and nothing kept its end,
// such as systemd's file descriptor store), init kills the command and
// exits, so that no sandbox runs without someone holding its egress. Just
// before it exits with the command's status, init sends that status as
// one LifeExit message: a supervisor that adopted the sandbox (and so is
// not init's parent, and cannot wait for it) learns it there.
//
// LifeExit is that message.
type LifeExit struct {
	// Code is init's exit status: the command's, 128+N when signal N
	// killed it.
	Code int `json:"code"`
	// The sandbox cgroup's limit counters when it ended, as init reads
	// them in its own cgroup view: processes the memory limit killed,
	// forks the task limit refused, periods the CPU quota throttled.
	OOMKills     uint64 `json:"oom_kills,omitempty"`
	TasksRefused uint64 `json:"tasks_refused,omitempty"`
	CPUThrottled uint64 `json:"cpu_throttled,omitempty"`
}

// SandboxHome is where the sandbox's home appears inside it.
const SandboxHome = "/home/agent"

// SandboxWorkspace is where a sandbox's private workspace (a tmpfs of
// Config.WorkspaceSize bytes) appears inside it.
const SandboxWorkspace = "/workspace"

// InodeBytes is how many bytes of a private tmpfs (home, /tmp) allow one
// inode: 131,072 files in 1 GiB, plenty for caches and node_modules, and
// bounded, unlike tmpfs's own default of half the host's memory pages.
const InodeBytes = 8 << 10

// Config is what init needs: the spec, resolved by the host.
type Config struct {
	// Version is the protocol version (Version).
	Version   int      `json:"version"`
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
	// (after cfg,status,egress,life) to idmap it with; -1 or absent: no idmap.
	IDMaps map[string]int `json:"idmaps,omitempty"`
	// Identities holds the device and inode each granted path (and the
	// home) had when the host checked it; init mounts a path only if it
	// still reaches that directory without following a symlink.
	Identities map[string][2]uint64 `json:"ids"`
	// RelayPorts are the loopback ports init relays to the host's proxy
	// (the proxy's first, then the MCP servers').
	RelayPorts []uint16 `json:"relay_ports"`
	// DNS starts the DNS sink on 127.0.0.1:53.
	DNS bool `json:"dns"`
	// NoNetwork closes the network: no relay, no DNS sink.
	NoNetwork bool `json:"no_network,omitempty"`
	// TmpSize sizes the one tmpfs that holds the private /tmp, /var/tmp
	// and /dev/shm; HomeSize the home's (bytes).
	TmpSize  int64 `json:"tmp_size"`
	HomeSize int64 `json:"home_size"`
	// NoFile and FileSize are RLIMIT_NOFILE and RLIMIT_FSIZE (0: none).
	NoFile   uint64 `json:"nofile"`
	FileSize uint64 `json:"fsize"`
	// NProc is the task limit (0: none), for RLIMIT_NPROC: the kernel
	// checks it before a fork copies the parent's memory, unlike the
	// cgroup's pids limit. It counts the tasks of the sandbox's uid in its
	// user namespace: the sandbox's own (a root caller's sandbox has a uid
	// of its own, a user's its own user namespace). Init lowers it by
	// what the cgroup holds that it does not count (nprocLimit).
	NProc uint64 `json:"nproc,omitempty"`
	// LandlockMin is the lowest Landlock ABI accepted.
	LandlockMin int `json:"landlock_min_abi"`
	// Degraded lists the layers that may be skipped when unavailable;
	// Unavailable the ones a test makes look unavailable.
	Degraded    []Layer `json:"degraded,omitempty"`
	Unavailable []Layer `json:"unavailable,omitempty"`
	// HideExtra lists more host directories to show empty.
	HideExtra []string `json:"hide_extra,omitempty"`
	// RootFS, if set, is a host directory (an unpacked image) whose top
	// level is the sandbox's system, bound read-only, instead of the
	// host's /usr, /etc, /bin, ...
	RootFS string `json:"root_fs,omitempty"`
	// StdinIsTTY makes init give the command a pty of its own.
	StdinIsTTY bool `json:"stdin_tty"`
	// Unprotect lists paths the caller left writable although they are
	// protected (internal/sandbox/protect).
	Unprotect []string `json:"unprotect,omitempty"`
	// Persistent: init runs no command of its own but serves exec
	// requests on the last descriptor of FDsEnv (ExecRequest).
	Persistent bool `json:"persistent,omitempty"`
	// Adoptable: the sandbox may outlive its starter (a supervisor that
	// hands it to its successor): init sets no parent-death signal and
	// relies on the life socket alone.
	Adoptable bool `json:"adoptable,omitempty"`
	// WorkspaceSize, when not 0, mounts a private tmpfs of that many
	// bytes at SandboxWorkspace, owned by UID: the kernel refuses writes
	// past it (ENOSPC).
	WorkspaceSize int64 `json:"workspace_size,omitempty"`
	// Masks are files shown with other contents, read-only, wherever the
	// sandbox sees them (an agent's MCP configuration whose secrets stay
	// on the host); a path the sandbox does not see is left alone.
	Masks []Mask `json:"masks,omitempty"`
}

// MaxMaskBytes bounds one mask's contents.
const MaxMaskBytes = 1 << 20

// Mask is a file shown with Data in place of its contents.
type Mask struct {
	// Path is absolute, without symbolic links.
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// Status is one line init writes on the status pipe.
type Status struct {
	Layer  Layer  `json:"layer,omitempty"`
	State  string `json:"state,omitempty"` // applied, degraded
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"` // fatal: init exits
	Code   int    `json:"code,omitempty"`  // with Error: the command could not start (126, 127)
	Ready  bool   `json:"ready,omitempty"` // the command has been started
	Pid    int    `json:"pid,omitempty"`   // its pid inside the sandbox
	// Event, from the repository guard, is an audit record to make:
	// "protected" or "refused", with Detail. Such lines also come after
	// Ready: the host reads the pipe to its end.
	Event string `json:"event,omitempty"`
	// Elapsed is the time since init's main started, for -v timings.
	Elapsed time.Duration `json:"elapsed,omitempty"`
}

// ParseFDs parses the value of FDsEnv: comma-separated descriptor
// numbers, each at least 3; nil when one is not.
func ParseFDs(s string) []int {
	var fds []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 3 {
			return nil
		}
		fds = append(fds, n)
	}
	return fds
}
