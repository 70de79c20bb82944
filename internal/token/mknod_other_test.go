//go:build !linux

package token

import "errors"

// mknodDevNull is not written for this system: the device case skips.
func mknodDevNull(string) error {
	return errors.ErrUnsupported
}
