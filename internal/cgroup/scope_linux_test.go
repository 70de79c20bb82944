package cgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

func propMap(props []sdbus.Property) map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	for _, p := range props {
		m[p.Name] = p.Value
	}
	return m
}

func TestScopePropertiesMinimal(t *testing.T) {
	m := propMap(scopeProperties("desc", "soda-mcp.slice", 42, "", Limits{}))
	want := map[string]struct {
		sig string
		val any
	}{
		"Description":     {"s", "desc"},
		"Slice":           {"s", "soda-mcp.slice"},
		"PIDs":            {"au", []uint32{42}},
		"CollectMode":     {"s", "inactive-or-failed"},
		"SendSIGKILL":     {"b", true},
		"TimeoutStopUSec": {"t", uint64(5000000)},
	}
	for name, w := range want {
		v, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if v.Signature().String() != w.sig {
			t.Errorf("%s has D-Bus type %s, want %s", name, v.Signature(), w.sig)
		}
		if !reflect.DeepEqual(v.Value(), w.val) {
			t.Errorf("%s = %#v, want %#v", name, v.Value(), w.val)
		}
	}
	for _, name := range []string{"MemoryMax", "MemoryAccounting", "TasksMax", "TasksAccounting", "CPUQuotaPerSecUSec", "CPUWeight", "StopPropagatedFrom", "Before"} {
		if _, ok := m[name]; ok {
			t.Errorf("%s set although not configured", name)
		}
	}
	if len(m) != len(want) {
		t.Errorf("got %d properties, want %d", len(m), len(want))
	}
}

func TestScopePropertiesLimits(t *testing.T) {
	l := Limits{MemoryMax: 50 << 20, TasksMax: 16, CPUQuota: 150, CPUWeight: 200}
	m := propMap(scopeProperties("d", "x.slice", 7, "soda-mcp@jira.service", l))
	want := map[string]struct {
		sig string
		val any
	}{
		"MemoryAccounting":   {"b", true},
		"MemoryMax":          {"t", uint64(50 << 20)},
		"TasksAccounting":    {"b", true},
		"TasksMax":           {"t", uint64(16)},
		"CPUQuotaPerSecUSec": {"t", uint64(1500000)},
		"CPUWeight":          {"t", uint64(200)},
		"StopPropagatedFrom": {"as", []string{"soda-mcp@jira.service"}},
		"Before":             {"as", []string{"soda-mcp@jira.service"}},
	}
	for name, w := range want {
		v, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if v.Signature().String() != w.sig {
			t.Errorf("%s has D-Bus type %s, want %s", name, v.Signature(), w.sig)
		}
		if !reflect.DeepEqual(v.Value(), w.val) {
			t.Errorf("%s = %#v, want %#v", name, v.Value(), w.val)
		}
	}
}

func TestLimitsAttrs(t *testing.T) {
	if got := (Limits{}).attrs(); !reflect.DeepEqual(got, []any{"limits", "none"}) {
		t.Errorf("empty limits: %v", got)
	}
	got := (Limits{MemoryMax: 1, TasksMax: 2, CPUQuota: 50, CPUWeight: 3}).attrs()
	want := []any{"memory_max", int64(1), "tasks_max", int64(2), "cpu_quota", "50%", "cpu_weight", uint64(3)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestUnitNames(t *testing.T) {
	p := &ScopePlacer{prefix: "soda-mcp-jira"}
	if got := p.UnitName("0123456789ab"); got != "soda-mcp-jira-0123456789ab.scope" {
		t.Errorf("plain name: %q", got)
	}
	p.prefix = "soda-mcp-my server"
	got := p.UnitName("ab/c")
	if want := `soda\x2dmcp\x2dmy\x20server-ab-c.scope`; got != want {
		t.Errorf("escaped name: %q, want %q", got, want)
	}
	if err := checkUnitName(got, ".scope"); err != nil {
		t.Errorf("escaped name invalid: %v", err)
	}
	for _, tc := range []struct {
		name, suffix string
		ok           bool
	}{
		{"soda-mcp.slice", ".slice", true},
		{"soda-mcp", ".slice", false},
		{".slice", ".slice", false},
		{"-x.slice", ".slice", false},
		{"a b.slice", ".slice", false},
		{"a@b.scope", ".scope", false},
		{strings.Repeat("a", 250) + ".scope", ".scope", false},
		{`a\x20b.scope`, ".scope", true},
	} {
		if err := checkUnitName(tc.name, tc.suffix); (err == nil) != tc.ok {
			t.Errorf("checkUnitName(%q, %q) = %v, want ok=%v", tc.name, tc.suffix, err, tc.ok)
		}
	}
}

func TestCgroupFSDir(t *testing.T) {
	root := t.TempDir()
	unified, named := filepath.Join(root, "unified"), filepath.Join(root, "systemd")
	cg := "/soda.slice/soda-mcp.slice/x.scope"
	for _, d := range []string{filepath.Join(unified, cg), filepath.Join(named, cg)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs := cgroupFS{unified: unified, unifiedRoot: "/", named: named, namedRoot: "/"}
	if _, err := fs.dir(cg); err == nil {
		t.Error("found a cgroup without cgroup.procs")
	}
	os.WriteFile(filepath.Join(named, cg, "cgroup.procs"), nil, 0o644)
	if d, err := fs.dir(cg); err != nil || d != filepath.Join(named, cg) {
		t.Errorf("named fallback: %q %v", d, err)
	}
	os.WriteFile(filepath.Join(unified, cg, "cgroup.procs"), nil, 0o644)
	if d, err := fs.dir(cg); err != nil || d != filepath.Join(unified, cg) {
		t.Errorf("unified first: %q %v", d, err)
	}
	// A mount rooted below the hierarchy's root (no cgroup namespace).
	fs = cgroupFS{unified: unified, unifiedRoot: "/soda.slice"}
	if d, err := fs.dir("/soda.slice/soda-mcp.slice/x.scope"); err == nil {
		t.Errorf("rooted mount resolved to %q without the cgroup being there", d)
	}
	os.MkdirAll(filepath.Join(unified, "soda-mcp.slice/x.scope"), 0o755)
	os.WriteFile(filepath.Join(unified, "soda-mcp.slice/x.scope/cgroup.procs"), nil, 0o644)
	if d, err := fs.dir("/soda.slice/soda-mcp.slice/x.scope"); err != nil || d != filepath.Join(unified, "soda-mcp.slice/x.scope") {
		t.Errorf("rooted mount: %q %v", d, err)
	}
}

func TestGlobEscape(t *testing.T) {
	if got, want := globEscape(`a\x2d*?[b].scope`), `a\\x2d\*\?\[b].scope`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestIsNoSuchUnit(t *testing.T) {
	if !isNoSuchUnit(dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}) {
		t.Error("value error not recognised")
	}
	if !isNoSuchUnit(&dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}) {
		t.Error("pointer error not recognised")
	}
	if isNoSuchUnit(dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}) {
		t.Error("other error recognised")
	}
}

// TestNewSystemdPlacerWithoutSystemd: on a host where systemd is not PID 1
// the constructor fails with a reason, so the caller can fall back.
func TestNewSystemdPlacerWithoutSystemd(t *testing.T) {
	if CheckSystemdPID1() == nil {
		t.Skip("systemd is PID 1 here; covered by the integration test")
	}
	_, err := NewSystemdPlacer(t.Context(), testLogger(t), "soda-test", "", Limits{})
	if err == nil || !strings.Contains(err.Error(), "systemd placer") {
		t.Fatalf("NewSystemdPlacer without systemd: %v", err)
	}
	t.Logf("as expected: %v", err)
}

// TestScopeCgroupIn: the scope's cgroup is read from /proc/PID/cgroup in
// systemd's own hierarchy, only when it names the unit.
func TestScopeCgroupIn(t *testing.T) {
	const unit = "soda-sandbox-x.scope"
	tests := []struct{ name, text, want string }{
		{"unified", "0::/soda-sandbox.slice/soda-sandbox-x.scope\n", "/soda-sandbox.slice/soda-sandbox-x.scope"},
		{"hybrid", "9:pids:/soda-sandbox.slice/soda-sandbox-x.scope\n1:name=systemd:/soda-sandbox.slice/soda-sandbox-x.scope\n0::/soda-sandbox.slice/soda-sandbox-x.scope\n", "/soda-sandbox.slice/soda-sandbox-x.scope"},
		{"legacy", "4:memory:/soda-sandbox.slice/soda-sandbox-x.scope\n1:name=systemd:/soda-sandbox.slice/soda-sandbox-x.scope\n", "/soda-sandbox.slice/soda-sandbox-x.scope"},
		{"user manager", "0::/user.slice/user-1000.slice/user@1000.service/soda-sandbox.slice/soda-sandbox-x.scope\n", "/user.slice/user-1000.slice/user@1000.service/soda-sandbox.slice/soda-sandbox-x.scope"},
		{"not yet moved", "0::/system.slice/foo.service\n", ""},
		{"a unit that only ends alike", "0::/soda-sandbox.slice/other-soda-sandbox-x.scope\n", ""},
		{"a controller line only", "4:memory:/soda-sandbox.slice/soda-sandbox-x.scope\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := scopeCgroupIn(tc.text, unit); got != tc.want {
				t.Errorf("scopeCgroupIn = %q, want %q", got, tc.want)
			}
		})
	}
}
