package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestNewChecksConfig: an engine is built only from a configuration that
// says what it needs; nothing missing is guessed from the process.
func TestNewChecksConfig(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name string
		cfg  Config
		want string // "" for success
	}{
		{"no cgroup manager", Config{Privileged: root}, "Config.Cgroups is not set"},
		{"unknown cgroup manager", Config{Privileged: root, Cgroups: "cgmanager"}, `unknown Config.Cgroups "cgmanager"`},
		{"privilege that is not there", Config{Privileged: !root, Cgroups: CgroupDirect}, map[bool]string{true: "as root the engine must be privileged", false: "needs root"}[root]},
		{"negative uid range", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: -5, Count: 3, LockDir: "/x"}}, "bad uid range"},
		{"uid range past 2^31", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: 1 << 30, Count: 1 << 30, LockDir: "/x"}}, "bad uid range"},
		{"uid range without lock dir", Config{Privileged: root, Cgroups: CgroupDirect, UIDs: UIDRange{First: 5000000, Count: 3}}, "bad uid range"},
		{"defaults", Config{Privileged: root, Cgroups: CgroupDirect}, ""},
		{"systemd", Config{Privileged: root, Cgroups: CgroupSystemd}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer e.Close()
				if e.cfg.UIDs != DefaultUIDs || e.cfg.Log == nil {
					t.Errorf("defaults not filled: %+v", e.cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
			}
		})
	}
}

// TestClosedNetworkEngine: an engine configured closed refuses a spec that
// would relay egress, before anything is created.
func TestClosedNetworkEngine(t *testing.T) {
	e := testEngine(t, func(c *Config) { c.ClosedNetwork = true })
	_, err := e.Start(t.Context(), Spec{Argv: []string{"true"}, Home: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "closed-network sandboxes only") {
		t.Fatalf("Start with egress on a closed engine: %v", err)
	}
}
