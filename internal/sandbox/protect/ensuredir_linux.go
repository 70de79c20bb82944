package protect

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// EnsureDir makes the directory p (and its missing parents) on the real
// filesystem at hostRoot+p, owned by the owner of the closest existing
// parent, without following symlinks. Failures are left to the plan,
// which skips what does not exist.
func EnsureDir(hostRoot, p string, mode os.FileMode) {
	if _, err := os.Lstat(p); err == nil {
		return
	}
	parent := filepath.Dir(p)
	if _, err := os.Lstat(parent); err != nil {
		EnsureDir(hostRoot, parent, 0o755)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, hostRoot+parent, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return
	}
	name := filepath.Base(p)
	if err := unix.Mkdirat(fd, name, uint32(mode.Perm())); err != nil {
		return
	}
	_ = unix.Fchownat(fd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	_ = unix.Fchmodat(fd, name, uint32(mode.Perm()), 0)
}
