package child

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the child gate and supervisor, as
// soda-mcpd does, and as the stand-in parent of the supervisor tests.
func TestMain(m *testing.M) {
	if IsGate() {
		RunGate()
	}
	if os.Getenv(fakeParentEnv) != "" {
		os.Exit(fakeParent())
	}
	os.Exit(m.Run())
}
