package systemd

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// send sends state to the manager with fds as SCM_RIGHTS.
func (s *FDStore) send(state string, fds []int) error {
	if !s.Available() {
		return ErrNoFDStore
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fd store: socket: %w", err)
	}
	defer unix.Close(sock)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// The manager checks the sender's credentials (NotifyAccess=): its
	// SO_PASSCRED gets them from the kernel.
	if err := unix.Sendmsg(sock, []byte(state), oob, &unix.SockaddrUnix{Name: s.addr}, 0); err != nil {
		return fmt.Errorf("fd store: %s: %w", strings.ReplaceAll(state, "\n", " "), err)
	}
	return nil
}
