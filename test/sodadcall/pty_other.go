//go:build !linux

package main

import (
	"errors"
	"os"
)

// openPty fails on other systems: the pty comes from Linux's /dev/ptmx,
// for sodad, which runs on Linux.
func openPty() (master, slave *os.File, err error) {
	return nil, nil, errors.New("a pty for sodad needs Linux")
}
