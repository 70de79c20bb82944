package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/protect"
)

// Planted files must never run on the host: init makes the protected paths
// of the read-write grants read-only in the sandbox's mount namespace (see
// internal/sandbox/protect for what is protected and how). What no mount
// can protect is watched from here.

// plantWatch is the host's note, taken before a sandbox starts, of what
// no mount can protect: the protected home paths that do not exist yet
// (a mount needs an existing mount point) and the git directories that
// already exist (one made during the run has writable hooks and
// configuration). After the run, planted lists what appeared there, so
// that the user is told before running it.
type plantWatch struct {
	rw, unprotect []string
	gitDirs       map[string]bool
	missing       []string
	placeholders  []string // links to placeholderTarget made by this run
}

// placeholderTarget is where a placeholder link points: a name that
// cannot exist and cannot be made, by anyone, on the host or in the
// sandbox (procfs refuses new names at its root). A program that opens,
// tests or creates through the link finds nothing and makes nothing:
// for bash, zsh, git or an X session a dangling link is a missing file.
const placeholderTarget = "/proc/soda-sandbox-protected"

// newPlantWatch notes the state of the read-write grants rw.
func newPlantWatch(rw, unprotect []string) *plantWatch {
	w := &plantWatch{rw: rw, unprotect: unprotect, gitDirs: map[string]bool{}}
	var homes []string
	if f, err := os.Open("/etc/passwd"); err == nil {
		homes = protect.PasswdHomes(f)
		f.Close()
	}
	for _, g := range rw {
		dirs, _ := protect.FindGitDirs(g)
		for _, d := range dirs {
			w.gitDirs[d] = true
			// A configuration made during the run would be read: a
			// missing one gets a placeholder too (git takes a dangling
			// link for a missing configuration file, but not for a
			// missing commondir, which it reads with lstat and fails on).
			for _, name := range []string{"config", "config.worktree"} {
				p := filepath.Join(d, name)
				if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) &&
					!slices.ContainsFunc(unprotect, func(u string) bool { return p == u || strings.HasPrefix(p, u+"/") }) && w.placeholder(p) {
					w.placeholders = append(w.placeholders, p)
				}
			}
		}
		for _, h := range homes {
			for _, rel := range protect.HomePaths {
				p := filepath.Join(h, rel)
				if !strings.HasPrefix(p, g+"/") {
					continue
				}
				if slices.Contains(protect.HomeDirsMade, rel) {
					continue // init makes them, empty, and protects them
				}
				if t, err := os.Readlink(p); err == nil && t == placeholderTarget {
					// Another run's placeholder: missing for this one too.
					w.missing = append(w.missing, p)
				} else if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
					w.missing = append(w.missing, p)
					if !slices.ContainsFunc(unprotect, func(u string) bool { return p == u || strings.HasPrefix(p, u+"/") }) && w.placeholder(p) {
						w.placeholders = append(w.placeholders, p)
					}
				}
			}
		}
	}
	return w
}

// placeholder makes a link to placeholderTarget at the missing path p
// (and its missing parents, as empty directories), owned by the owner of
// the closest existing parent, so that init can pin it: a protected file
// that does not exist cannot be made during the run. It says whether it
// made the link.
func (w *plantWatch) placeholder(p string) bool {
	parent := filepath.Dir(p)
	if _, err := os.Lstat(parent); err != nil {
		protect.EnsureDir("", parent, 0o755)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, parent, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	name := filepath.Base(p)
	if err := unix.Symlinkat(placeholderTarget, fd, name); err != nil {
		return false
	}
	_ = unix.Fchownat(fd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	return true
}

// removePlaceholders removes the links this run made that are still
// links to placeholderTarget (once the sandbox has ended).
func (w *plantWatch) removePlaceholders() {
	for _, p := range w.placeholders {
		if t, err := os.Readlink(p); err == nil && t == placeholderTarget {
			_ = os.Remove(p)
		}
	}
	w.placeholders = nil
}

// planted lists the paths made during the run that the host may run:
// protected home paths that did not exist, and in git directories that
// did not exist, hooks (other than git's *.sample) and a configuration
// that names a program (protect.GitRunsKeys). Unprotected paths are left out.
func (w *plantWatch) planted() []string {
	var out []string
	keep := func(p string) {
		if !slices.ContainsFunc(w.unprotect, func(u string) bool { return p == u || strings.HasPrefix(p, u+"/") }) {
			out = append(out, p)
		}
	}
	for _, p := range w.missing {
		if t, err := os.Readlink(p); err == nil && t == placeholderTarget {
			continue // still (another run's) placeholder
		}
		if _, err := os.Lstat(p); err == nil {
			keep(p)
		}
	}
	for _, g := range w.rw {
		dirs, _ := protect.FindGitDirs(g)
		for _, d := range dirs {
			if w.gitDirs[d] {
				continue
			}
			if ents, err := os.ReadDir(filepath.Join(d, "hooks")); err == nil {
				for _, e := range ents {
					if !strings.HasSuffix(e.Name(), ".sample") {
						keep(filepath.Join(d, "hooks", e.Name()))
					}
				}
			}
			if b, err := os.ReadFile(filepath.Join(d, "config")); err == nil && protect.GitConfigRuns(string(b)) {
				keep(filepath.Join(d, "config"))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
