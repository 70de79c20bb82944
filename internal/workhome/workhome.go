// Package workhome keeps the private homes of sandboxes on the host: one
// per run, in a state directory, each with a lock held for as long as its
// sandbox runs, so that a later run (or a daemon's sweep) can tell a home
// left by a killed run, whose lock is free, from a live sibling's, whose
// lock is held, and remove only the former. Removal never follows a
// symbolic link, whatever the sandbox left in the home.
package workhome

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SystemDir is the state directory of root's sandboxes.
const SystemDir = "/run/soda/sandbox"

const (
	prefix     = "home-"
	lockSuffix = ".lock"
	// A lock is made under a pending name, locked, then renamed to its
	// .lock name: a sweep never sees a lock file before it is held.
	pendingSuffix = ".pending"
	// pendingAge is when a sweep takes a pending lock whose lock is free
	// as left by a run killed while making its home (that takes
	// microseconds).
	pendingAge = time.Minute
)

// StateDir is the state directory for the sandboxes of the user euid:
// SystemDir for root, else soda-sandbox-UID in $XDG_RUNTIME_DIR, or in
// $TMPDIR or /tmp without one. getenv looks the variables up (os.Getenv,
// or a test's stand-in).
func StateDir(euid int, getenv func(string) string) string {
	if euid == 0 {
		return SystemDir
	}
	base := getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = getenv("TMPDIR")
	}
	if base == "" {
		base = "/tmp"
	}
	return filepath.Join(base, fmt.Sprintf("soda-sandbox-%d", euid))
}

// Dir is a state directory holding sandbox homes.
type Dir struct {
	path string
}

// Open makes the state directory path (0700) if it does not exist and
// checks that it is a real directory owned by euid that nobody else can
// write to: in a shared /tmp, someone else may have made it first.
func Open(path string, euid int) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, fmt.Errorf("check %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != euid || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("%s is not a directory owned by uid %d and writable only by it; remove it or set XDG_RUNTIME_DIR", path, euid)
	}
	return &Dir{path: path}, nil
}

// Path is the state directory's path.
func (d *Dir) Path() string { return d.path }

// Home is the private home of one sandbox, locked until Remove.
type Home struct {
	path string
	lock *os.File
}

// Path is the home's path on the host.
func (h *Home) Path() string { return h.path }

// New makes a new home (0700) in d, locked until its Remove.
func (d *Dir) New() (*Home, error) {
	const attempts = 100
	var err error
	for range attempts {
		var h *Home
		if h, err = d.try(); err == nil || !errors.Is(err, fs.ErrExist) {
			return h, err
		}
	}
	return nil, err
}

// try makes a home under a fresh random name; fs.ErrExist means that
// the name was taken after all (by a leftover), try another.
func (d *Dir) try() (*Home, error) {
	f, err := os.CreateTemp(d.path, prefix+"*"+pendingSuffix)
	if err != nil {
		return nil, fmt.Errorf("create sandbox home: %w", err)
	}
	pending := f.Name()
	fail := func(err error) (*Home, error) {
		f.Close()
		os.Remove(pending)
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(fmt.Errorf("lock sandbox home: %w", err))
	}
	base := strings.TrimSuffix(pending, pendingSuffix)
	if err := os.Mkdir(base, 0o700); err != nil {
		return fail(fmt.Errorf("create sandbox home: %w", err))
	}
	// The home exists before its lock file does: a sweep that lists the
	// lock finds it held, one that does not list it leaves the home alone.
	if err := renameNoReplace(pending, base+lockSuffix); err != nil {
		os.Remove(base)
		return fail(fmt.Errorf("lock sandbox home: %w", err))
	}
	return &Home{path: base, lock: f}, nil
}

// Remove removes the home and everything in it, then its lock. A home that
// cannot be removed keeps its lock file, so that a later Sweep tries again.
func (h *Home) Remove() error {
	err := RemoveTree(h.path)
	if err == nil {
		os.Remove(h.path + lockSuffix)
	}
	h.lock.Close()
	return err
}

// Sweep removes the homes that sandboxes killed before they could remove
// theirs left in d: those whose lock is free. A live sibling's home, whose
// lock is held (by another process or this one), is never touched. It
// returns how many homes it removed; a home it cannot remove is logged on
// log and left for the next sweep.
func (d *Dir) Sweep(log *slog.Logger) int {
	locks, _ := filepath.Glob(filepath.Join(d.path, prefix+"*"+lockSuffix))
	removed := 0
	for _, l := range locks {
		if sweepOne(l, lockSuffix, log) {
			removed++
		}
	}
	pending, _ := filepath.Glob(filepath.Join(d.path, prefix+"*"+pendingSuffix))
	for _, p := range pending {
		if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > pendingAge && sweepOne(p, pendingSuffix, log) {
			removed++
		}
	}
	return removed
}

// Leftovers names, without removing anything, the entries of the state
// directory path that belong to no live home: a home or lock whose lock
// is free, a pending lock older than a home takes to make, and anything
// else. A live home (another sandbox's, or one being made) is not named.
// A directory that does not exist has none.
func Leftovers(path string) ([]string, error) {
	ents, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	var left []string
	for _, e := range ents {
		n := e.Name()
		var held bool
		switch {
		case !strings.HasPrefix(n, prefix):
		case strings.HasSuffix(n, lockSuffix):
			held = lockHeld(filepath.Join(path, n))
		case strings.HasSuffix(n, pendingSuffix):
			fi, err := e.Info()
			held = err == nil && time.Since(fi.ModTime()) <= pendingAge || lockHeld(filepath.Join(path, n))
		case e.IsDir():
			// A home is live while its lock, final or pending, is.
			held = names[n+lockSuffix] && lockHeld(filepath.Join(path, n+lockSuffix)) ||
				names[n+pendingSuffix] && lockHeld(filepath.Join(path, n+pendingSuffix))
		}
		// An entry gone since the listing (a home being removed: its
		// lock goes last) is not left behind.
		if _, err := os.Lstat(filepath.Join(path, n)); !held && err == nil {
			left = append(left, n)
		}
	}
	return left, nil
}

// openLock opens the lock file at path, never through a symbolic link.
func openLock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// lockHeld says whether someone holds the lock file at path (this process
// too, through another open file).
func lockHeld(path string) bool {
	f, err := openLock(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil
}

// sweepOne removes the home of lock, and lock, if the lock is free.
func sweepOne(lock, suffix string, log *slog.Logger) bool {
	f, err := openLock(lock)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // in use
	}
	home := strings.TrimSuffix(lock, suffix)
	if err := RemoveTree(home); err != nil {
		log.Warn("remove stale sandbox home", "home", home, "err", err)
		return false
	}
	os.Remove(lock)
	return true
}

// RemoveTree removes dir and everything in it, first giving back the
// owner's permissions on the directories the sandbox made unreadable. It
// follows no symbolic link: one in the tree is removed, not its target,
// and no permission is changed outside dir (the changes go through an
// os.Root on dir). A dir that does not exist is not an error.
func RemoveTree(dir string) error {
	if root, err := os.OpenRoot(dir); err == nil {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if d != nil && d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
				if rel, rerr := filepath.Rel(dir, p); rerr == nil {
					_ = root.Chmod(rel, 0o700)
				}
			}
			return nil
		})
		root.Close()
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
