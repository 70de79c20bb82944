package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAtTaskLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"at the limit", map[string]string{"pids.peak": "40\n", "pids.max": "40\n"}, true},
		{"within the slack", map[string]string{"pids.peak": "32\n", "pids.max": "40\n"}, true},
		{"below it", map[string]string{"pids.peak": "31\n", "pids.max": "40\n"}, false},
		{"no limit", map[string]string{"pids.peak": "31\n", "pids.max": "max\n"}, false},
		{"no peak (older kernel)", map[string]string{"pids.max": "40\n"}, false},
		{"never used", map[string]string{"pids.peak": "0\n", "pids.max": "8\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for f, v := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := atTaskLimit(dir); got != tc.want {
				t.Errorf("atTaskLimit: %v, want %v", got, tc.want)
			}
		})
	}
}
