package httpfront

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// queued reports whether c has bytes that the kernel received and nobody
// has read yet: a client that has sent its request before the server got to
// it.
func queued(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	// Control, not Read: the server's goroutine may be blocked in Read,
	// holding the descriptor's read lock.
	if cerr := rc.Control(func(fd uintptr) {
		n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); cerr != nil || err != nil {
		return false
	}
	return n > 0
}
