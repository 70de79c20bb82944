//go:build linux && !amd64 && !arm64

package seccomp

import (
	"errors"
	"testing"
)

func TestUnsupportedArch(t *testing.T) {
	if _, err := Program(); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("Program: %v, want ErrUnsupportedArch", err)
	}
	if err := Install(); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("Install: %v, want ErrUnsupportedArch", err)
	}
}
