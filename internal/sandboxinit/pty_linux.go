package sandboxinit

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox attached to a terminal gets its own pseudo-terminal, made by
// init in the sandbox's private devpts: the command's session has it as
// controlling terminal, and the caller's terminal only ever sees bytes
// copied by init (the host side puts it in raw mode: sandbox.MakeRaw).

// sandboxPTY is init's side of the command's terminal.
type sandboxPTY struct {
	master, slave *os.File
	outDone       chan struct{}
}

// openSandboxPTY opens a pty in the sandbox's own devpts, gives the slave
// to uid/gid, sizes it like the caller's terminal (init's stdin) and
// starts copying between them.
func openSandboxPTY(uid, gid int) (*sandboxPTY, error) {
	master, err := os.OpenFile("/dev/pts/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("pty number: %w", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open pty %d: %w", n, err)
	}
	_ = slave.Chown(uid, gid)
	p := &sandboxPTY{master: master, slave: slave, outDone: make(chan struct{})}
	p.resize()
	// The pty's output goes where the caller sees it: stdout if that is
	// the terminal, else stderr if that is, else nowhere (only the echo of
	// what is typed; the command's output then goes to the caller's pipe).
	out := io.Discard
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			out = f
			break
		}
	}
	go func() { _, _ = io.Copy(master, os.Stdin) }()
	go func() {
		defer close(p.outDone)
		_, _ = io.Copy(out, master) // EIO once every slave fd is closed
	}()
	return p, nil
}

// resize copies the caller's terminal size to the pty.
func (p *sandboxPTY) resize() {
	if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// drain waits (briefly) until the command's last output has been copied.
func (p *sandboxPTY) drain() {
	p.slave.Close()
	select {
	case <-p.outDone:
	case <-time.After(500 * time.Millisecond):
	}
}
