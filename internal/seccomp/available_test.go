//go:build linux

package seccomp

import (
	"errors"
	"runtime"
	"slices"
	"testing"
)

func TestAvailable(t *testing.T) {
	err := Available()
	switch runtime.GOARCH {
	case "amd64", "arm64":
		// The kernels soda supports (and this test host) have seccomp
		// filters; a failure here says what is missing.
		if err != nil {
			t.Fatalf("Available: %v", err)
		}
	default:
		if !errors.Is(err, ErrUnsupportedArch) {
			t.Fatalf("Available on %s: %v, want ErrUnsupportedArch", runtime.GOARCH, err)
		}
	}
}

func TestMissingActions(t *testing.T) {
	tests := []struct {
		name  string
		avail string
		want  []string
	}{
		{"6.x kernel", "kill_process kill_thread trap errno user_notif trace log allow\n", nil},
		{"4.14 kernel", "kill_process kill_thread trap errno trace log allow\n", nil},
		{"no kill_process (4.13)", "kill trap errno trace allow\n", []string{"kill_process"}},
		{"no errno", "kill_process kill_thread allow", []string{"errno"}},
		{"empty", "", []string{"errno", "kill_process"}},
		{"substring only", "errnox kill_processes", []string{"errno", "kill_process"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingActions(tc.avail); !slices.Equal(got, tc.want) {
				t.Errorf("missingActions(%q) = %q, want %q", tc.avail, got, tc.want)
			}
		})
	}
}
