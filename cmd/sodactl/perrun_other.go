//go:build !linux

package main

import "io"

// watchMask would stop the sandbox when the masked file is replaced on the
// host (inotify, see perrun_linux.go); sandboxes need Linux, so on other
// systems there is nothing to watch.
func (p *perRun) watchMask(grants []string, stop func(), stderr io.Writer) (end func()) {
	return func() {}
}
