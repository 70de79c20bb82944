package validated

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTokenCommand: the command a 401 names prints this worker's token:
// with its state directory when that is not the default.
func TestTokenCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		stateDir, want string
	}{
		{"/var/lib/soda/validate", "sodactl validate token shellcheck"},
		{"/var/lib/soda/validate/", "sodactl validate token shellcheck"},
		{"/tmp/state", "sodactl validate token shellcheck --state-dir /tmp/state"},
		{"state", "sodactl validate token shellcheck --state-dir " + filepath.Join(wd, "state")},
	}
	for _, tt := range tests {
		if got := tokenCommand("shellcheck", tt.stateDir); got != tt.want {
			t.Errorf("tokenCommand(shellcheck, %q) = %q, want %q", tt.stateDir, got, tt.want)
		}
	}
}
