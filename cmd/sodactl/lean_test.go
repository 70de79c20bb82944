//go:build soda_lean

package main

import (
	"io"
	"testing"
)

// TestLeanHandsOff: the lean sodactl hands to the full one exactly the
// commands it does not link, before doing anything else, and serves the
// rest itself.
func TestLeanHandsOff(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		handOff string // "": served here
		run     bool
	}{
		{"image", []string{"image", "list"}, "sodactl image", false},
		{"image help", []string{"image", "--help"}, "sodactl image", false},
		{"top", []string{"top", "--once"}, "sodactl top", false},
		{"validate", []string{"validate", "token", "shellcheck"}, "sodactl validate", false},
		{"sandbox mcp", []string{"sandbox", "mcp", "--direct"}, "sodactl sandbox mcp", false},
		{"run --image", []string{"run", "--direct", "--image", "example.test/x:1", "--", "true"}, "sodactl run --image", true},
		{"run --image-store", []string{"run", "--image-store", dir, "--", "true"}, "sodactl run --image", true},
		{"version", []string{"--version"}, "", false},
		{"mcp list", []string{"--config-dir", dir, "mcp", "list"}, "", false},
		{"run usage error", []string{"run", "--direct"}, "", false},
		{"run help", []string{"run", "--help"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := asHandOff(dispatch(tt.args, io.Discard, io.Discard))
			switch {
			case tt.handOff == "" && h != nil:
				t.Fatalf("%q handed off (%v); the lean sodactl serves it", tt.args, h)
			case tt.handOff != "" && h == nil:
				t.Fatalf("%q not handed off; want %q", tt.args, tt.handOff)
			case h != nil && (h.what != tt.handOff || h.run != tt.run):
				t.Fatalf("%q handed off as %+v; want %q, run %v", tt.args, *h, tt.handOff, tt.run)
			}
		})
	}
}
