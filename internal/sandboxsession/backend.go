package sandboxsession

import (
	"context"
	"io"
	"time"
)

// Backend starts live sandboxes with a private workspace: the engine in
// this process (Direct) or sodad (later). The network, limits and flags
// are the backend's, fixed when it was made; nothing a session asks for
// widens them.
type Backend interface {
	// Start starts a live sandbox whose workspace (a tmpfs at
	// /workspace, the commands' working directory) holds quota bytes.
	Start(ctx context.Context, quota int64) (Box, error)
	// Mode names the backend for the log: "direct" or "sodad".
	Mode() string
}

// Box is a live sandbox.
type Box interface {
	// ID is its engine's (or sodad's) id: the journal's SODA_SANDBOX.
	ID() string
	// Exec runs argv in the sandbox, in dir (inside /workspace), with
	// stdin, writing stdout and stderr, killing it at timeout. When it
	// ends, every other process it left in the sandbox is ended too
	// before Exec returns: nothing outlives its call.
	Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error)
	// Close ends the sandbox and everything in it.
	Close(ctx context.Context) error
}

// ExitStatus is how an Exec ended.
type ExitStatus struct {
	Code     int
	Signal   string
	TimedOut bool
	// MemoryKills and TasksRefused: how often the sandbox's memory limit
	// killed and its task limit refused a fork meanwhile (where known).
	MemoryKills, TasksRefused uint64
	// WorkspaceFull says that the workspace had no free space or inodes
	// during the command, as the sandbox's init saw it (statfs), not as
	// its output says.
	WorkspaceFull bool
}

// auditFeed is a Box whose egress decisions and limit hits are read from
// elsewhere (sodad's audit) after each execution.
type auditFeed interface {
	auditSince(ctx context.Context) []Event
}
