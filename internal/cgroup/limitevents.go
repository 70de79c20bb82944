package cgroup

// LimitEvents counts how often a cgroup's limits struck.
type LimitEvents struct {
	// OOMKills is how many processes the memory limit killed.
	OOMKills uint64
	// TasksMax is how many forks the task limit refused, as the pids
	// controller counts them (pids.events max); 1 where it counted none
	// but the cgroup's tasks came within TasksPeakSlack of pids.max
	// (pids.peak): a soda sandbox's RLIMIT_NPROC, at the same limit,
	// refuses forks before the controller sees them, and the kernel
	// counts those refusals nowhere.
	TasksMax uint64
}

// TasksPeakSlack is how close to pids.max a cgroup's pids.peak must come
// for LimitEvents.TasksMax to say that the task limit struck: a root
// caller's sandbox leaves its repository guard that many tasks more than
// it had (internal/sandboxinit), so that its RLIMIT_NPROC is met first.
const TasksPeakSlack = 8
