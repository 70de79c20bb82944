package sandbox

import "time"

// ExitStatus is how the sandboxed command ended.
type ExitStatus struct {
	// Code is the exit code; 128+N when killed by signal N.
	Code int `json:"code"`
	// Signal names the signal that killed it, if any.
	Signal string `json:"signal,omitempty"`
	// TimedOut is true when the sandbox was stopped by its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// MemoryKills and TasksRefused are, for an Exec, how many processes
	// the memory limit killed and forks the task limit refused while it
	// ran (where the host counts them).
	MemoryKills  uint64 `json:"memory_kills,omitempty"`
	TasksRefused uint64 `json:"tasks_refused,omitempty"`
	// CPUThrottled is, for a sandbox's end, how many periods its CPU
	// quota throttled it (where the host counts them).
	CPUThrottled uint64 `json:"cpu_throttled,omitempty"`
	// WorkspaceFull is, for an Exec in a sandbox with a workspace
	// (Spec.WorkspaceSize), whether the workspace had less than a page
	// free or no free inode when init sampled it: when the command
	// started, every wire.ExecSampleInterval (100 ms) while it ran, and
	// when it ended. The filesystem says so, not the command's output; a
	// fill the command undid within one interval can go unseen, and a
	// workspace already full when the command started counts.
	WorkspaceFull bool `json:"workspace_full,omitempty"`
}

// StopGrace is how long a stopped sandbox's command has between SIGTERM
// and the SIGKILL of everything left in the sandbox (Sandbox.Stop,
// Spec.Timeout).
const StopGrace = 5 * time.Second
