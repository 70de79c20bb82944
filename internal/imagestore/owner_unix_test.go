package imagestore

import (
	"io/fs"
	"syscall"
)

// owner is fi's uid and gid.
func owner(fi fs.FileInfo) (int, int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
