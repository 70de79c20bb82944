package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Handing scopes over. A supervisor that hands its children to a
// successor (through systemd's file descriptor store) passes each scope's
// lock file along: the lock belongs to the open file, so the successor
// holds it from the moment it receives the descriptor, and no sweeper
// takes the scope for a leftover in between.

// HandoverGroup is a Group that can be handed to a successor.
type HandoverGroup interface {
	Group
	// Unit is the scope's unit name.
	Unit() string
	// LockFile returns a copy of the descriptor of the scope's lock file
	// (the caller closes it), or an error if the group holds no lock.
	LockFile() (*os.File, error)
	// Detach lets go of the scope without stopping it: the lock is
	// closed here (a copy elsewhere keeps it), the unit stays.
	Detach()
}

// Unit is the scope's unit name.
func (g *scopeGroup) Unit() string { return g.unit }

// LockFile returns a copy of the lock file's descriptor.
func (g *scopeGroup) LockFile() (*os.File, error) {
	if g.lock == nil {
		return nil, fmt.Errorf("scope %s holds no owner lock", g.unit)
	}
	fd, err := unix.FcntlInt(g.lock.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("copy the lock of %s: %w", g.unit, err)
	}
	return os.NewFile(uintptr(fd), g.lock.path), nil
}

// Detach closes this process's copy of the lock and forgets the scope.
func (g *scopeGroup) Detach() {
	if g.lock != nil {
		g.lock.f.Close()
		g.lock = nil
	}
	g.attempted = false
	g.dir = ""
}

// Adopt returns the group of child id's existing scope, whose process pid
// runs in it, owned from now on through lock (the predecessor's lock
// file, as LockFile returned it). It checks that lock is the scope's lock
// file and is held, and that pid is in the scope's cgroup.
func (p *ScopePlacer) Adopt(id string, pid int, lock *os.File) (Group, error) {
	name := p.UnitName(id)
	if err := checkUnitName(name, ".scope"); err != nil {
		return nil, fmt.Errorf("scope for child %q: %w", id, err)
	}
	if p.lockDir == "" || lock == nil {
		return nil, fmt.Errorf("adopt %s: no owner lock", name)
	}
	path := filepath.Join(p.lockDir, name+lockSuffix)
	var held, now unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &held); err != nil {
		return nil, fmt.Errorf("adopt %s: lock: %w", name, err)
	}
	if err := unix.Stat(path, &now); err != nil || held.Dev != now.Dev || held.Ino != now.Ino {
		return nil, fmt.Errorf("adopt %s: the descriptor passed is not its lock file %s", name, path)
	}
	// The same open file: taking the lock again succeeds only if it is
	// this file's (a lock another open file holds makes this fail).
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("adopt %s: its lock is held by another process", name)
		}
		return nil, fmt.Errorf("adopt %s: lock: %w", name, err)
	}
	cg := scopeCgroupOf(pid, name)
	if cg == "" {
		return nil, fmt.Errorf("adopt %s: process %d is not in it", name, pid)
	}
	dir, err := p.fs.dir(cg)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	if err := checkInCgroup(pid, cg, dir); err != nil {
		return nil, fmt.Errorf("adopt %s: %w", name, err)
	}
	return &scopeGroup{p: p, id: id, unit: name, lock: &scopeLock{f: lock, path: path},
		pid: pid, attempted: true, cgroup: cg, dir: dir}, nil
}
