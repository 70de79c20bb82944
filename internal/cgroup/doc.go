// Package cgroup places processes in groups that can be limited and
// killed as a whole: what internal/child starts its children in, and the
// sandbox engine its sandboxes.
//
// A Placer makes one Group per child: a transient systemd scope when
// systemd is PID 1 (NewSystemdPlacer, NewUserSystemdPlacer; the child
// starts as a gate, see IsGate and Gate, and execs the real command only
// once it is inside its scope), else a cgroup v2 directory when the host
// lets the caller create one (NewPlacer, NewCgroupPlacer), else a process
// group (NewProcessGroupPlacer). For root on a cgroup v1/v2 hybrid host,
// NewCgroup1Placer puts a process in directories of the v1 memory, pids
// and cpu hierarchies (the sandbox uses it). A Parent holds the groups of
// every placer that names it, under one collective limit. LimitEventsOf
// reads how often a group's limits struck.
//
// Where the cgroup file systems are is read from /proc/self/mountinfo
// in one place (readMounts, mountinfo_linux.go), whatever asks: the v2
// tree, the v1 hierarchies, systemd's view of them, a process's limit
// counters, the sweep.
//
// Owners mark their groups with locks (a scope's, LockGroup for the
// directories an engine makes itself) that the kernel drops when they
// die; ScopePlacer.SweepLeftovers stops the scopes whose owner is gone,
// and SweepGroups, the one sweep of directories (v2 groups and v1
// hierarchies alike), removes the leftovers of a prefix in every
// hierarchy mounted, at any depth.
//
// Placement is Linux-only: it goes through cgroups, systemd over D-Bus
// and /proc, in _linux.go files. What only describes a group (Limits,
// LimitEvents, the Group and Placer interfaces) is in plain files, and
// other.go gives other systems a NewPlacer, NewSystemdPlacer and
// RemoveLockDir that fail or do nothing, so that the packages that use
// them build there.
package cgroup
