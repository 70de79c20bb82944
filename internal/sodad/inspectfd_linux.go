package sodad

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// inspectFd looks at an open fd: its access mode, whether it is a
// terminal or a directory.
func inspectFd(fd int) (fdKind, error) {
	var k fdKind
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return k, fmt.Errorf("fstat: %w", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return k, fmt.Errorf("fcntl: %w", err)
	}
	if fl&unix.O_PATH != 0 {
		k.path = true
		return k, nil
	}
	switch fl & unix.O_ACCMODE {
	case unix.O_RDONLY:
		k.readable = true
	case unix.O_WRONLY:
		k.writable = true
	case unix.O_RDWR:
		k.readable, k.writable = true, true
	}
	k.directory = st.Mode&unix.S_IFMT == unix.S_IFDIR
	k.fifo = st.Mode&unix.S_IFMT == unix.S_IFIFO
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		k.terminal = true
	}
	return k, nil
}
