//go:build !linux

package runstate

import (
	"errors"
	"fmt"
)

// ProcStart returns the start time of process pid: on this system, an
// error wrapping errors.ErrUnsupported (Linux reads it from /proc). A
// record with a start time then never reads as alive.
func ProcStart(pid int) (uint64, error) {
	return 0, fmt.Errorf("start time of process %d: %w", pid, errors.ErrUnsupported)
}
