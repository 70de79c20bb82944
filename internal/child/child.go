package child

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// Spec describes a child to start.
type Spec struct {
	// Argv is the command line; Argv[0] is looked up in PATH.
	Argv []string
	// Dir is the working directory; empty means the caller's.
	Dir string
	// Env is appended to the inherited environment (minus systemd's
	// activation variables).
	Env []string
	// Supervise starts the child under a supervisor process (the program
	// re-executed, see IsGate) that kills the child's whole group when
	// this process dies, even by SIGKILL, and starts the child with no
	// capabilities (bounding set included) and no_new_privs.
	Supervise bool
	// User, if set, is who the child runs as; it needs Supervise.
	User *Identity
	// Ledger, if set, keeps a record of each live child so that a
	// successor can kill what a killed predecessor left (see Ledger).
	Ledger *Ledger
}

// Grace holds the shutdown waits.
type Grace struct {
	// AfterStdinClose is how long to wait for a voluntary exit after stdin is closed.
	AfterStdinClose time.Duration
	// AfterTerm is how long to wait after SIGTERM before killing everything.
	AfterTerm time.Duration
}

// DefaultGrace is the shutdown timing used unless configured otherwise.
var DefaultGrace = Grace{AfterStdinClose: 2 * time.Second, AfterTerm: 3 * time.Second}

// Group is where a child's processes live: a cgroup or a process group.
type Group interface {
	// Prepare sets up cmd so the child starts inside the group.
	Prepare(cmd *exec.Cmd) error
	// Started is called once the child has a pid. A group that places the
	// child after the fork (through a gate) does so here and releases the
	// gate; on error, Start kills the child and releases the group.
	Started(ctx context.Context, pid int) error
	// Signal sends sig to every process in the group.
	Signal(sig syscall.Signal) error
	// Kill kills every process in the group and waits until it is empty.
	Kill(ctx context.Context) error
	// Release frees the group's resources (the cgroup directory).
	Release() error
	// Count reports how many processes the group still holds.
	Count() int
	// String names the group for logs.
	String() string
}

// Placer creates a Group for each new child.
type Placer interface {
	// NewGroup creates the group for a child identified by id.
	NewGroup(id string) (Group, error)
	// Mode names the isolation: "systemd-scope", "cgroup", "cgroup-v1" or
	// "process-group".
	Mode() string
	// Unenforced lists the configured limits (MemoryMax, TasksMax,
	// CPUWeight, CPUQuota) that this placer cannot enforce.
	Unenforced() []string
}
