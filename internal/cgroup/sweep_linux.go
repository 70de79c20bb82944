package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Ownership of cgroup directories an engine makes itself (no systemd:
// the cgroup v2 directory and the v1 ones, v1_linux.go). As for
// scopes (scopelock_linux.go), the owner of a group holds an exclusive
// flock on LOCKDIR/NAME.lock from before it makes the group's first
// directory until it has removed the last. The kernel drops the lock when
// the owner dies, however it dies: a group whose lock can be taken lost
// its owner, one whose lock is held is a live process's (this one's
// included) and is never touched. SweepGroups finds the groups' directories
// in every cgroup hierarchy mounted, at any depth: the v1 memory
// directory is made below the owner's own memory cgroup, which another
// process (a later start from another login session) does not share.

// GroupLockDir is where owners keep their groups' lock files: as root
// /run/soda/cgroups, otherwise soda/cgroups in $XDG_RUNTIME_DIR; "" (no
// locks: the sweep then goes by emptiness and age alone) without one.
func GroupLockDir() string {
	if os.Geteuid() == 0 {
		return "/run/soda/cgroups"
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" && filepath.IsAbs(rt) {
		return filepath.Join(rt, "soda", "cgroups")
	}
	return ""
}

// GroupLock is an owner's lock on the directories of one group.
type GroupLock struct{ l *scopeLock }

// LockGroup takes the lock of the group name (the directories' name) in
// dir for its owner, waiting while another process holds it (a sweeper
// removing a leftover of the same name) until ctx ends. Take it before
// making the group's first directory; Release it once the last is gone.
// With dir "" it returns a nil lock (Release does nothing).
func LockGroup(ctx context.Context, dir, name string) (*GroupLock, error) {
	if dir == "" {
		return nil, nil
	}
	l, err := acquireScopeLock(ctx, dir, name)
	if err != nil {
		return nil, fmt.Errorf("cgroup owner lock: %w", err)
	}
	return &GroupLock{l: l}, nil
}

// Release removes the lock file and gives the lock up.
func (g *GroupLock) Release() {
	if g != nil {
		g.l.release(true)
	}
}

// unitSuffixes end the names of cgroups systemd makes: never an engine's.
var unitSuffixes = []string{".scope", ".slice", ".service", ".socket", ".mount", ".swap"}

// SweepGroups removes the cgroup directories named PREFIX-* that owners
// killed before they could remove them left, in every cgroup hierarchy of
// this process's mount namespace (one reading of mountinfo: the v2 tree
// and each v1 hierarchy, each walked whole). For each group name:
//
//   - its lock in lockDir is held: a live owner's, left alone;
//   - its lock is free: the owner is gone; what still runs in its
//     directories is killed (SIGKILL, or cgroup.kill) and they are
//     removed, then the lock file;
//   - it has no lock file (an owner without lockDir, or an older soda):
//     each directory that holds no process and has not changed for
//     minAge is removed (a younger one may be a sibling's between its
//     creation and its clone).
//
// Names with a systemd unit suffix (.scope, ...) are systemd's and are
// skipped. It returns the directories it removed; a directory it cannot
// remove is logged and left for the next sweep.
func SweepGroups(ctx context.Context, log *slog.Logger, prefix, lockDir string, minAge time.Duration) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	groups := mounts.groups(prefix + "-")
	if lockDir != "" {
		names, err := groupLocks(lockDir, prefix+"-")
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if _, ok := groups[n]; !ok {
				groups[n] = nil // a lock without directories (killed while making them)
			}
		}
	}
	var removed []string
	var errs []error
	for _, name := range sortedKeys(groups) {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		dirs := groups[name]
		var l *scopeLock
		if lockDir != "" {
			l, err = tryLock(filepath.Join(lockDir, name+lockSuffix), false)
			switch {
			case errors.Is(err, errLockHeld):
				continue // a live owner's
			case errors.Is(err, os.ErrNotExist):
				l = nil // no owner to judge by
			case err != nil:
				errs = append(errs, err)
				continue
			}
		}
		if l == nil {
			for _, d := range dirs {
				fi, err := os.Stat(d)
				if err != nil || time.Since(fi.ModTime()) < minAge || len(appendProcs(nil, d)) > 0 {
					continue
				}
				if err := removeCgroupDir(d); err != nil {
					log.Debug("leftover cgroup kept", "cgroup", d, "err", err)
					continue
				}
				log.Info("removed a leftover cgroup (its owner was killed)", "cgroup", d, "age", time.Since(fi.ModTime()).Round(time.Second))
				removed = append(removed, d)
			}
			continue
		}
		// The owner is gone: nothing of the group may run on.
		left := 0
		for _, d := range dirs {
			if err := killDir(ctx, d); err != nil {
				log.Warn("leftover cgroup kept: its processes", "cgroup", d, "err", err)
				left++
				continue
			}
			if err := removeCgroupDir(d); err != nil {
				log.Warn("leftover cgroup kept", "cgroup", d, "err", err)
				left++
				continue
			}
			log.Info("removed a leftover cgroup (its owner was killed)", "cgroup", d)
			removed = append(removed, d)
		}
		l.release(left == 0) // kept: the next sweep tries again
	}
	return removed, errors.Join(errs...)
}

// groups walks every cgroup hierarchy of ms (each superblock once) for
// directories whose name starts with prefix, without entering them, and
// returns them by name.
func (ms cgroupMounts) groups(prefix string) map[string][]string {
	mounts := ms
	// A hierarchy mounted twice (or bound elsewhere) is walked once, from
	// its mount of the widest root.
	best := map[[2]int]int{}
	for i, m := range mounts {
		k := [2]int{m.Major, m.Minor}
		if j, ok := best[k]; !ok || len(m.Root) < len(mounts[j].Root) {
			best[k] = i
		}
	}
	idx := make([]int, 0, len(best))
	for _, i := range best {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	out := map[string][]string{}
	for _, i := range idx {
		top := mounts[i].Mountpoint
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == top {
				return nil // unreadable: skipped
			}
			name := d.Name()
			if !strings.HasPrefix(name, prefix) {
				return nil
			}
			if !slices.ContainsFunc(unitSuffixes, func(s string) bool { return strings.HasSuffix(name, s) }) {
				out[name] = append(out[name], p)
			}
			return fs.SkipDir
		})
	}
	return out
}

// killDir kills every process in the cgroup dir and its children
// (cgroup.kill where the kernel has it, else SIGKILL to each until none
// is left) and waits until they are gone, for up to 5 s.
func killDir(ctx context.Context, dir string) error {
	if len(appendProcs(nil, dir)) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		for _, pid := range appendProcs(nil, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		pids := appendProcs(nil, dir)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // forks that raced the last round
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes left: %w", len(pids), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// groupLocks lists the group names with a lock file in dir that start
// with prefix.
func groupLocks(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list cgroup owner locks: %w", err)
	}
	var out []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), lockSuffix); ok && e.Type().IsRegular() && strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, nil
}
