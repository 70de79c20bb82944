//go:build !linux

package sodad

import "errors"

// inspectFd fails on other systems: what an fd is (O_PATH, a terminal) is
// read the Linux way, and sodad, whose sandboxes need Linux, runs there.
func inspectFd(fd int) (fdKind, error) {
	return fdKind{}, errors.New("sodad needs Linux")
}
