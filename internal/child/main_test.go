package child

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the child gate, as soda-mcpd does.
func TestMain(m *testing.M) {
	if IsGate() {
		RunGate()
	}
	os.Exit(m.Run())
}
