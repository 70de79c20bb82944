package wire

// A live sandbox (Config.Persistent) runs commands on request:
//
//	host ──exec {id, argv, env, dir} + stdin, stdout, stderr (SCM_RIGHTS)──▶ init
//	host ◀──────────────── {id, pid} started, or {id, error, code} ────────── init
//	host ──signal {id, sig} (timeout, cancelled ctx) ───────────────────────▶ init
//	host ◀──────────────── {id, exited, code, signal} ─────────────────────── init
//
// on a SOCK_SEQPACKET socket pair, one JSON message per packet. Init,
// already confined, forks each command in a session (and process group)
// of its own, which inherits every layer; it reaps them and reports their
// status. When the host closes its end, init exits, and with it, PID 1 of
// the sandbox's PID namespace, every process left in it.

// ExecRequest is one message from the host to init.
type ExecRequest struct {
	Op     string   `json:"op"` // "exec" (with 3 descriptors) or "signal"
	ID     uint64   `json:"id"`
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	Signal int      `json:"sig,omitempty"`
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
}

// ExecMaxMsg bounds one message (argv and environment).
const ExecMaxMsg = 1 << 20
