package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A sandbox attached to a terminal gets its own pseudo-terminal, made by
// init in the sandbox's private devpts (internal/sandboxinit): the command's session has it as
// controlling terminal, and the caller's terminal only ever sees bytes
// copied by init. The command cannot inject input into the caller's shell
// (TIOCSTI), change the caller's terminal settings, or keep it open after
// the sandbox ends. The caller puts its terminal in raw mode (MakeRaw) so
// that keys reach the command unchanged.

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// MakeRaw puts the terminal tty in raw mode and returns the function that
// restores it.
func MakeRaw(tty *os.File) (restore func() error, err error) {
	saved, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("read terminal settings: %w", err)
	}
	raw := *saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("set raw mode: %w", err)
	}
	return func() error { return unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, saved) }, nil
}

// SaveTerminal records the settings of the terminal f and returns the
// function that puts them back, for a terminal passed to the sandbox as
// it is (its output only): whatever the command does to its modes is
// undone when sodactl exits.
func SaveTerminal(f *os.File) (restore func() error, err error) {
	saved, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("read terminal settings: %w", err)
	}
	return func() error { return unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, saved) }, nil
}
