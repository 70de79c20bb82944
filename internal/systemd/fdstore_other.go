//go:build !linux

package systemd

import (
	"errors"
	"fmt"
	"strings"
)

// send fails on other systems: systemd, and with it the store, is Linux's.
func (s *FDStore) send(state string, fds []int) error {
	if !s.Available() {
		return ErrNoFDStore
	}
	return fmt.Errorf("fd store: %s: %w", strings.ReplaceAll(state, "\n", " "), errors.ErrUnsupported)
}
