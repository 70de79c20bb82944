package sodadclient

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CopyWindowSize gives the pty master the window size of the terminal
// from (on SIGWINCH, and once at the start).
func CopyWindowSize(master, from *os.File) error {
	ws, err := unix.IoctlGetWinsize(int(from.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return fmt.Errorf("read the window size: %w", err)
	}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("set the pty's window size: %w", err)
	}
	return nil
}

// Relay copies in to master and master to out, the caller's side of a
// pty-attached sandbox. The returned channel is closed once master's
// output is drained (every holder of the slave has closed it); the
// in-to-master copy ends with in or the process.
func Relay(master, in, out *os.File) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return // EIO: the slave side is closed
			}
		}
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if _, werr := master.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return done
}
