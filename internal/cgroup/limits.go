package cgroup

// Limits are per-child resource limits; zero values mean unlimited.
type Limits struct {
	// MemoryMax is the memory limit in bytes (MemoryMax=, memory.max).
	MemoryMax int64
	// TasksMax is the maximum number of tasks (TasksMax=, pids.max).
	TasksMax int64
	// CPUWeight is the relative CPU weight, 1..10000 (CPUWeight=, cpu.weight).
	CPUWeight uint64
	// CPUQuota is the CPU time limit in percent of one CPU: 50 is half a
	// CPU, 200 two CPUs (CPUQuota=, cpu.max).
	CPUQuota uint64
}
