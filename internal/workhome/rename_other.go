//go:build !linux

package workhome

import "os"

// renameNoReplace renames from to to unless to exists (fs.ErrExist):
// link(2) does not replace either (renameat2's RENAME_NOREPLACE is
// Linux's).
func renameNoReplace(from, to string) error {
	if err := os.Link(from, to); err != nil {
		return err
	}
	return os.Remove(from)
}
