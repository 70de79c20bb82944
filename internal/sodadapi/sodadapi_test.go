package sodadapi

import "testing"

func TestSandboxPath(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"dev-7f3a", SandboxPathPrefix + "/dev_2d7f3a"},
		{"3e1c-90", SandboxPathPrefix + "/_33e1c_2d90"},
		{"abc", SandboxPathPrefix + "/abc"},
	} {
		if got := string(SandboxPath(tc.id)); got != tc.want {
			t.Errorf("SandboxPath(%q) = %s, want %s", tc.id, got, tc.want)
		}
		if !SandboxPath(tc.id).IsValid() {
			t.Errorf("SandboxPath(%q) is not a valid object path", tc.id)
		}
	}
}
