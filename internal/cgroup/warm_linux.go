package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// Warmer starts cgroup v1 migrations that move nothing: this process
// into the cgroup it is already in, in its memory (else pids, else cpu)
// hierarchy. A sandbox's placement that follows a few milliseconds later
// then waits less, or not at all.
//
// Why: every cgroup v1 migration takes the kernel's
// cgroup_threadgroup_rwsem for writing, a per-CPU rw-semaphore whose
// writer waits for an RCU grace period unless another writer has just
// had one (5-15 ms on an idle host, measured: 7.7 ms for the first
// migration, 0.05 ms for the next ones). Started at the beginning of a
// sandbox's start, that wait overlaps the work before the placement
// (the clone, init's mounts) instead of adding to it. It changes no
// process's cgroup and no limit; on a host whose cgroup2 is mounted with
// favordynmods the semaphore never waits and a warm-up costs a few
// microseconds.
type Warmer struct {
	procs string // our own cgroup.procs in one v1 hierarchy
}

// NewWarmer finds, once, the cgroup.procs a warm-up writes. It returns
// nil (whose Warm does nothing) where there is none this process can
// write: no v1 hierarchy, or unprivileged.
func NewWarmer() *Warmer {
	own, _, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	ms, err := readMounts()
	if err != nil {
		return nil
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
		if unix.Access(procs, unix.W_OK) == nil {
			return &Warmer{procs: procs}
		}
	}
	return nil
}

// Warm starts one warm-up migration in the background.
func (w *Warmer) Warm() {
	if w != nil {
		go w.migrate()
	}
}

// migrate writes this process's pid into its own cgroup.procs.
func (w *Warmer) migrate() {
	// O_WRONLY without O_CREAT: a cgroup file or nothing.
	f, err := os.OpenFile(w.procs, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(strconv.Itoa(os.Getpid()))
	f.Close()
}
