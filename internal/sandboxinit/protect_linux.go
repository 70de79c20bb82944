package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/protect"
	"github.com/soda-project/soda/internal/sandbox/wire"
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

// masksDir is where init keeps the masks' contents: a tmpfs of its own,
// read-only to the sandbox.
const masksDir = "/run/soda-masks"

// maskFiles shows each mask's Data, read-only, in place of its file
// wherever the sandbox sees it (its path reached without following a
// symbolic link); a file the sandbox does not see is left alone. It
// returns the paths masked.
func maskFiles(masks []wire.Mask) ([]string, error) {
	if len(masks) == 0 {
		return nil, nil
	}
	var size int
	for _, m := range masks {
		size += len(m.Data) + 4096
	}
	if err := os.MkdirAll(masksDir, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount("soda-masks", masksDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=%d", size+4096)); err != nil {
		return nil, fmt.Errorf("mount tmpfs on %s: %w", masksDir, err)
	}
	var done []string
	for i, m := range masks {
		dst, err := unix.Openat2(unix.AT_FDCWD, m.Path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // not in the sandbox's view
		}
		if err != nil {
			return nil, fmt.Errorf("mask %s: %w", m.Path, err)
		}
		err = maskOne(dst, filepath.Join(masksDir, strconv.Itoa(i)), m.Data)
		unix.Close(dst)
		if err != nil {
			return nil, fmt.Errorf("mask %s: %w", m.Path, err)
		}
		done = append(done, m.Path)
	}
	if err := unix.Mount("", masksDir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("make %s read-only: %w", masksDir, err)
	}
	return done, nil
}

// maskOne writes data to src and binds it read-only over the file dst
// (an O_PATH descriptor) refers to, which must be a regular file.
func maskOne(dst int, src string, data []byte) error {
	var st unix.Stat_t
	if err := unix.Fstat(dst, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file in the sandbox")
	}
	if st.Nlink > 1 {
		// Another name of the same file would show it unmasked.
		return fmt.Errorf("the file has %d hard links: remove the others (find -samefile) so that no other name shows it", st.Nlink)
	}
	if err := os.WriteFile(src, data, 0o444); err != nil {
		return err
	}
	fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}
