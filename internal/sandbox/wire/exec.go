package wire

import "time"

// A live sandbox (Config.Persistent) runs commands on request:
//
//	host ──exec {id, argv, env, dir, end_others} + stdin, stdout, stderr (SCM_RIGHTS)──▶ init
//	host ◀──────────────── {id, pid} started, or {id, error, code} ──────────────────── init
//	host ──signal {id, sig} (timeout, cancelled ctx) ─────────────────────────────────▶ init
//	host ◀──────────────── {id, exited, code, signal, ws_full} ──────────────────────── init
//
// on a SOCK_SEQPACKET socket pair, one JSON message per packet. Init,
// already confined, forks each command in a session (and process group)
// of its own, which inherits every layer; it reaps them and reports their
// status. When the host closes its end, init exits, and with it, PID 1 of
// the sandbox's PID namespace, every process left in it.
//
// With end_others, init kills every process of the sandbox that is not
// its own (init, the repository guard) nor in the session of another
// command still running, once the command has ended, and reports its
// exit only when they are all dead: nothing the command left behind acts
// after its reply. With a workspace (Config.WorkspaceSize), ws_full says
// that the workspace had no free block or inode at one of init's samples
// while the command ran (ExecSampleInterval).

// ExecRequest is one message from the host to init.
type ExecRequest struct {
	Op     string   `json:"op"` // "exec" (with 3 descriptors) or "signal"
	ID     uint64   `json:"id"`
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	Signal int      `json:"sig,omitempty"`
	// EndOthers: when the command ends, kill what it (or anything but
	// init and other running commands) left in the sandbox before the
	// exit reply.
	EndOthers bool `json:"end_others,omitempty"`
}

// ExecReply is one message from init to the host.
type ExecReply struct {
	ID      uint64 `json:"id"`
	Pid     int    `json:"pid,omitempty"`      // started, as this pid in the sandbox
	Error   string `json:"error,omitempty"`    // not started
	ErrCode int    `json:"code_err,omitempty"` // with Error: 126, 127 as a shell
	Exited  bool   `json:"exited,omitempty"`   // ended, with:
	Code    int    `json:"code,omitempty"`     // exit code, 128+N when killed by N
	Signal  int    `json:"sig,omitempty"`      // the signal that killed it
	// WorkspaceFull: the workspace had no free block or inode at one of
	// init's samples while the command ran.
	WorkspaceFull bool `json:"ws_full,omitempty"`
	// EndError says why what the command left could not be ended
	// (EndOthers): only its own process group was killed.
	EndError string `json:"end_error,omitempty"`
}

// ExecSampleInterval is how often init samples the workspace's free
// blocks and inodes while a command runs (and once when it starts and
// when it ends): a fill undone within one interval can go unseen.
const ExecSampleInterval = 100 * time.Millisecond

// ExecMaxMsg bounds one message (argv and environment).
const ExecMaxMsg = 1 << 20
