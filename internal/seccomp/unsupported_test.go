//go:build linux && !amd64 && !arm64

package seccomp

import (
	"errors"
	"testing"
)

func TestUnsupportedArch(t *testing.T) {
	if _, err := Program(Options{}); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("Program: %v, want ErrUnsupportedArch", err)
	}
	if err := Install(Options{}); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("Install: %v, want ErrUnsupportedArch", err)
	}
	if s := Summary(Options{}); s != nil {
		t.Errorf("Summary: %v, want nil", s)
	}
}
