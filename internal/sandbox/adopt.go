package sandbox

import (
	"errors"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// Names of the files Handover returns.
const (
	HandoverLife   = "life"
	HandoverEgress = "egress"
	HandoverStatus = "status"
	HandoverUID    = "uid"
	HandoverScope  = "scope"
)

// ErrLiveNotHandable is Handover's error for a live sandbox
// (Spec.Persistent): its exec channel cannot be handed over.
var ErrLiveNotHandable = errors.New("sandbox handover: a live sandbox's exec channel cannot be handed over")

// ErrDetached is what Wait returns for a sandbox let go by Detach.
var ErrDetached = errors.New("sandbox detached: handed over to a successor")

// HandoverState is what a successor needs, besides the files, to adopt a
// live sandbox. It is JSON, for the supervisor's state record.
type HandoverState struct {
	ID string `json:"id"`
	// Pid is init's pid, PidStart its start time (clock ticks since boot,
	// field 22 of /proc/PID/stat): a recycled pid is not taken for it.
	Pid      int    `json:"pid"`
	PidStart uint64 `json:"pid_start"`
	// Unit is the sandbox's scope.
	Unit string `json:"unit"`
	// UID is the sandbox's dedicated uid (privileged engines; 0: none).
	UID       int           `json:"uid,omitempty"`
	Egress    egress.Policy `json:"egress"`
	NoNetwork bool          `json:"no_network,omitempty"`
	Limits    Limits        `json:"limits"`
	// Deadline is when the sandbox's timeout stops it (zero: never).
	Deadline time.Time `json:"deadline,omitzero"`
	Started  time.Time `json:"started"`
	// Seq is the last audit record's sequence number.
	Seq uint64 `json:"seq"`
	// Watch is the repository protection's note (read-write grants).
	Watch *WatchState `json:"watch,omitempty"`
}

// WatchState is a plantWatch as JSON.
type WatchState struct {
	ReadWrite    []string `json:"rw,omitempty"`
	Unprotect    []string `json:"unprotect,omitempty"`
	GitDirs      []string `json:"git_dirs,omitempty"`
	Missing      []string `json:"missing,omitempty"`
	Placeholders []string `json:"placeholders,omitempty"`
}
