package workhome

import (
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to unless to exists (fs.ErrExist).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL {
		return err
	}
	// A file system without RENAME_NOREPLACE: link(2) does not replace
	// either.
	if err := os.Link(from, to); err != nil {
		return err
	}
	return os.Remove(from)
}
