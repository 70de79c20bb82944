package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
)

// WarmMigrations starts, in the background, a cgroup v1 migration that
// moves nothing: this process into the cgroup it is already in, in its
// memory (else pids, else cpu) hierarchy. The placement of a sandbox that
// follows a few milliseconds later then waits less, or not at all.
//
// Why: every cgroup v1 migration takes the kernel's
// cgroup_threadgroup_rwsem for writing, a per-CPU rw-semaphore whose
// writer waits for an RCU grace period unless another writer has just
// had one (5-15 ms on an idle host, measured: 7.7 ms for the first
// migration, 0.05 ms for the next ones). Started at the beginning of a
// sandbox's start, that wait overlaps the work before the placement
// (the clone, init's mounts) instead of adding to it. It changes no
// process's cgroup and no limit; on a host whose cgroup2 is mounted with
// favordynmods the semaphore never waits and this costs a few
// microseconds. Where the process cannot write such a cgroup.procs
// (unprivileged, no v1 hierarchy), it does nothing.
func WarmMigrations() {
	go warmMigrations()
}

func warmMigrations() {
	own, _, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return
	}
	ms, err := readMounts()
	if err != nil {
		return
	}
	mounts := ms.v1()
	for _, c := range []string{"memory", "pids", "cpu"} {
		m, ok := mounts[c]
		path, in := own[c]
		if !ok || !in {
			continue
		}
		rel, err := filepath.Rel(m.root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // our cgroup is not below this mount's root
		}
		procs := filepath.Join(m.mount, rel, "cgroup.procs")
		// O_WRONLY without O_CREAT: a cgroup file or nothing.
		f, err := os.OpenFile(procs, os.O_WRONLY, 0)
		if err != nil {
			continue
		}
		_, _ = f.WriteString(strconv.Itoa(os.Getpid()))
		f.Close()
		return
	}
}
