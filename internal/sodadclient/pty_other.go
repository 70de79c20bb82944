//go:build !linux

package sodadclient

import (
	"errors"
	"os"
)

// OpenPTY opens a pseudo-terminal for a sandbox attached to one. On this
// system it fails: the pty is opened through Linux's /dev/ptmx and
// /dev/pts, and sodad, which takes it, runs on Linux.
func OpenPTY() (master, slave *os.File, err error) {
	return nil, nil, errors.New("open a pty: sodad's pseudo-terminals need Linux")
}
