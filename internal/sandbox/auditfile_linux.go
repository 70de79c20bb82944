package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// OpenAuditFile opens the audit file at path for appending, creating it
// (0600) if it does not exist, for a sandbox granted the directories
// grants (read-write or read-only). The caller may be root, and the agent
// must not be able to choose what root writes to, so path is refused when
// it is inside a grant (where the agent could replace, delete or forge
// it), when any of its components is a symbolic link, or when it exists
// but is not a regular file of the caller's with a single link.
func OpenAuditFile(path string, grants []string) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("audit file %s: %w", path, err)
	}
	for _, g := range grants {
		ga, err := filepath.Abs(g)
		if err != nil {
			continue
		}
		// Compare both as given and resolved: a grant named through a
		// link is refused elsewhere, but the check must not depend on it.
		for _, gp := range []string{ga, resolvedOr(ga)} {
			if abs == gp || insideAny(abs, []string{gp}) || insideAny(resolvedOr(filepath.Dir(abs)), []string{gp}) {
				return nil, fmt.Errorf("audit file %s is inside the granted directory %s, where the sandbox could replace or forge it: put it outside every grant", abs, g)
			}
		}
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Mode:    0o600,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		switch err {
		case unix.ELOOP:
			return nil, fmt.Errorf("audit file %s: a component of the path is a symbolic link; name the real path", abs)
		case unix.ENXIO: // a FIFO without a reader, or a socket
			return nil, fmt.Errorf("audit file %s is not a regular file", abs)
		}
		return nil, fmt.Errorf("audit file %s: %w", abs, err)
	}
	f := os.NewFile(uintptr(fd), abs)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit file %s: %w", abs, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("audit file %s is not a regular file", abs)
	case st.Nlink != 1:
		err = fmt.Errorf("audit file %s has %d hard links; use a file of its own", abs, st.Nlink)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("audit file %s belongs to uid %d, not to you (uid %d)", abs, st.Uid, os.Geteuid())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	// O_NONBLOCK only kept open() from hanging on a FIFO; a regular file
	// ignores it, but clear it all the same.
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit file %s: %w", abs, err)
	}
	return f, nil
}

// resolvedOr returns p with symlinks resolved, or p itself if that fails.
func resolvedOr(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
