package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveUnprotect(t *testing.T) {
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "repo"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, want, err string
	}{
		{"missing below a grant", ws + "/repo/.git/hooks", ws + "/repo/.git/hooks", ""},
		{"cleaned", ws + "/repo/../repo/x", ws + "/repo/x", ""},
		{"the grant itself", ws, ws, ""},
		{"outside", "/etc/passwd", "", "not inside a read-write grant"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveUnprotect(tt.path, []string{ws})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
