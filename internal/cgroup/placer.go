package cgroup

import (
	"context"
	"os/exec"
	"syscall"
)

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

// DirGroup is a Group with a cgroup directory of its own: a cgroup v2
// group's or a systemd scope's. A supervisor kills what is left in it
// should its parent die, and a ledger records it (internal/child).
type DirGroup interface {
	Group
	// CgroupDir is the group's directory in the cgroup file system ("" while
	// a scope is not placed yet, or once it is detached).
	CgroupDir() string
	// OwnsDir reports whether the placer made the directory and its owner
	// removes it (a cgroup v2 group), or systemd does (a scope).
	OwnsDir() bool
}
