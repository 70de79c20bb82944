package hostcpu

import "testing"

func TestSandboxPercent(t *testing.T) {
	for _, tt := range []struct {
		ncpu int
		want uint64
	}{
		{-1, 100}, {0, 100}, {1, 100}, {2, 100}, {3, 200}, {4, 300}, {8, 700}, {64, 6300}, {1024, 102300},
	} {
		if got := SandboxPercent(tt.ncpu); got != tt.want {
			t.Errorf("SandboxPercent(%d) = %d, want %d", tt.ncpu, got, tt.want)
		}
	}
}
