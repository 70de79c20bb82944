package sandboxinit

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/protect"
)

// protectGrants makes the protected paths of the read-write grants
// read-only (see internal/sandbox/protect) and returns what it protected and what it left
// writable because the caller unprotected it. hostRoot is where the
// host's root is (the old root, before it is detached): missing
// directories are made there, on the real filesystem, not through an
// idmapped grant.
func protectGrants(cfg *config, hostRoot string) (done, skipped []string, err error) {
	if err := makeGitTemplate(); err != nil {
		return nil, nil, err
	}
	var homes []string
	if f, err := os.Open("/etc/passwd"); err == nil {
		homes = protect.PasswdHomes(f)
		f.Close()
	}
	plan, skipped := protect.Unprotect(protect.Plan(cfg.ReadWrite, homes, hostRoot), cfg.Unprotect)
	for _, p := range plan {
		if err := bindSelf(p.Path, p.ReadOnly); err != nil {
			return nil, nil, fmt.Errorf("protect %s: %w", p.Path, err)
		}
		if p.ReadOnly {
			done = append(done, p.Path)
		}
	}
	return done, skipped, nil
}

// bindSelf binds path onto itself, read-only when ro, through a
// descriptor opened without following any symlink: what is bound is the
// path as it is (a symbolic link is bound as the link, which pins it).
func bindSelf(path string, ro bool) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open without following symlinks: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		ro = false // a link has no contents to write: the mount pins it
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if ro {
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("mount_setattr: %w", err)
		}
	}
	if err := unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}
