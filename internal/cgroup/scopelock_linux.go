package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Ownership of scopes. A scope's owner (the process whose placer created
// it) holds an exclusive flock on the file LOCKDIR/UNIT.lock from before it
// asks systemd for the unit until the unit is gone. The kernel drops the
// lock when the owner dies, however it dies, so a scope whose lock can be
// taken is a leftover, and one whose lock is held belongs to a live
// process: SweepLeftovers stops only the former. A scope with no lock file
// (made by an owner that could not write LOCKDIR, or by an older soda) is
// never judged a leftover.

// lockPoll is how often acquireScopeLock retries a lock a sweeper holds.
const lockPoll = 20 * time.Millisecond

// lockSuffix ends every scope lock file name.
const lockSuffix = ".lock"

// defaultLockDir is where a placer keeps its scopes' lock files: for the
// system manager, /run/soda/scopes as root and $XDG_RUNTIME_DIR/soda/
// system-scopes otherwise; for the user's manager, $XDG_RUNTIME_DIR/soda/
// scopes. It is "" (no locks, no sweeping) without a runtime directory.
func defaultLockDir(user bool) string {
	if !user && os.Geteuid() == 0 {
		return "/run/soda/scopes"
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" || !filepath.IsAbs(rt) {
		return ""
	}
	if user {
		return filepath.Join(rt, "soda", "scopes")
	}
	return filepath.Join(rt, "soda", "system-scopes")
}

// scopeLock is a held lock on a scope's lock file.
type scopeLock struct {
	f    *os.File
	path string
}

// errLockHeld says that a live process holds the lock.
var errLockHeld = errors.New("held by a live process")

// tryLock opens path (creating it if create) and takes its lock without
// waiting. It returns errLockHeld when another process holds it and
// os.ErrNotExist when there is no such file (or it was replaced or
// removed meanwhile: a lock on a file no longer at path guards nothing).
func tryLock(path string, create bool) (*scopeLock, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	// Go opens with O_CLOEXEC: the scope's processes never inherit it.
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errLockHeld
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Stat(path, &now); err != nil || held.Dev != now.Dev || held.Ino != now.Ino {
		f.Close()
		return nil, os.ErrNotExist
	}
	return &scopeLock{f: f, path: path}, nil
}

// acquireScopeLock takes the lock of unit in dir for its owner, waiting
// while another process holds it (a sweeper stopping a leftover of the
// same name) until ctx ends.
func acquireScopeLock(ctx context.Context, dir, unit string) (*scopeLock, error) {
	path := filepath.Join(dir, unit+lockSuffix)
	for {
		// In the loop: an owner that stopped may remove the directory
		// once it is empty (RemoveLockDir).
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("scope lock directory: %w", err)
		}
		l, err := tryLock(path, true)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, os.ErrNotExist):
			continue // removed by its sweeper meanwhile: make a new one
		case !errors.Is(err, errLockHeld):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("scope %s is owned by a live process (its lock %s is held): %w", unit, path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// release gives the lock up; with remove, the file goes first (the unit
// is gone: there is nothing left to sweep).
func (l *scopeLock) release(remove bool) {
	if l == nil {
		return
	}
	if remove {
		_ = os.Remove(l.path)
	}
	l.f.Close()
}

// RemoveLockDir removes dir, a directory of scope locks (WithLockDir),
// when it holds none: an owner that stopped cleanly released and removed
// its locks. A directory with locks left (of a live owner, or of scopes
// a later sweep stops) is kept.
func RemoveLockDir(dir string) error {
	err := os.Remove(dir)
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return nil
	default:
		return fmt.Errorf("remove scope lock directory %s: %w", dir, err)
	}
}

// lockedUnits lists the unit names that have a lock file in dir and
// start with prefix.
func lockedUnits(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list scope locks: %w", err)
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), lockSuffix)
		if ok && e.Type().IsRegular() && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".scope") {
			out = append(out, name)
		}
	}
	return out, nil
}
