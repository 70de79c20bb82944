//go:build !linux

package sandboxsession

import (
	"errors"
	"os"
)

// openTmpfile fails on other systems (O_TMPFILE is Linux's): the store
// takes a named file, removed at once.
func openTmpfile(dir string) (*os.File, error) { return nil, errors.ErrUnsupported }
