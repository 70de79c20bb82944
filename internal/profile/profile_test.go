package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/serverconf"
)

const devConf = `[Profile]
Description=Developers
Users=alice 1001
Groups=developers,2000

[Grants]
MCP=jira github
Allow=api.github.com:443 *.githubusercontent.com:443
AllowPrivate=gitlab.internal:443

[Paths]
ReadWritePaths=/srv/work
ReadOnlyPaths=/srv/reference

[Limits]
MemoryMax=4G
TasksMax=512
CPUQuota=200%
CPUWeight=50
Timeout=8h
TmpSize=2G
`

func mustGrant(t *testing.T, s string, private bool) egress.Grant {
	t.Helper()
	g, err := egress.ParseGrant(s, private)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParseFull(t *testing.T) {
	p, err := Parse("/etc/soda/sandbox/dev.conf", "dev", []byte(devConf))
	if err != nil {
		t.Fatal(err)
	}
	want := &Profile{
		Name: "dev", Path: "/etc/soda/sandbox/dev.conf", Description: "Developers",
		Users: []string{"alice", "1001"}, Groups: []string{"developers", "2000"},
		MCP: []string{"jira", "github"},
		Allow: []egress.Grant{
			mustGrant(t, "api.github.com:443", false),
			mustGrant(t, "*.githubusercontent.com:443", false),
			mustGrant(t, "gitlab.internal:443", true),
		},
		ReadWritePaths: []string{"/srv/work"}, ReadOnlyPaths: []string{"/srv/reference"},
		Limits: Limits{MemoryMax: 4 << 30, TasksMax: 512, CPUPercent: 200, CPUWeight: 50, Timeout: 8 * time.Hour, TmpSize: 2 << 30, HomeSize: DefaultLimits.HomeSize, WorkspaceSize: DefaultLimits.WorkspaceSize},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", p, want)
	}
}

func TestParseLists(t *testing.T) {
	tests := []struct {
		name string
		in   string
		get  func(*Profile) any
		want any
	}{
		{"lists add up", "[Profile]\nUsers=a\nUsers=b,c a\n", func(p *Profile) any { return p.Users }, []string{"a", "b", "c"}},
		{"empty clears", "[Profile]\nUsers=a\nUsers=\nUsers=b\n", func(p *Profile) any { return p.Users }, []string{"b"}},
		{"empty Allow clears only public", "[Grants]\nAllowPrivate=x.internal:1\nAllow=a.com:443\nAllow=\n", func(p *Profile) any { return len(p.Allow) }, 1},
		{"star", "[Profile]\nUsers=*\n", func(p *Profile) any { return p.Users }, []string{"*"}},
		{"defaults", "", func(p *Profile) any { return p.Limits }, DefaultLimits},
		{"no network", "[Grants]\nNoNetwork=yes\n", func(p *Profile) any { return p.NoNetwork }, true},
		{"per-run MCP servers", "[Grants]\nPerRunMCP=yes\n", func(p *Profile) any { return p.PerRunMCP }, true},
		{"no per-run MCP servers by default", "[Grants]\nMCP=jira\n", func(p *Profile) any { return p.PerRunMCP }, false},
		{"continuation", "[Grants]\nMCP=a \\\n b\n", func(p *Profile) any { return p.MCP }, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("x.conf", "x", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(p); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseHostile: every broken file fails with its line and key.
func TestParseHostile(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		line     int
		key      string
		contains string
	}{
		{"unknown section", "[Sandbox]\nX=1\n", 2, "Sandbox.X", "unknown section"},
		{"unknown key", "[Limits]\nMemoryMax=1G\nMemoryHigh=1G\n", 3, "Limits.MemoryHigh", "unknown key"},
		{"duplicate ceiling", "[Limits]\nMemoryMax=1G\n\nMemoryMax=64G\n", 4, "Limits.MemoryMax", "first on line 2"},
		{"duplicate across sections", "[Limits]\nTasksMax=5\n[Profile]\n[Limits]\nTasksMax=6\n", 5, "Limits.TasksMax", "set twice"},
		{"duplicate NoNetwork", "[Grants]\nNoNetwork=no\nNoNetwork=yes\n", 3, "Grants.NoNetwork", "set twice"},
		{"huge size", "[Limits]\nMemoryMax=99999999999T\n", 2, "Limits.MemoryMax", "not a size"},
		{"overflow size", "[Limits]\nMemoryMax=9223372036854775808\n", 2, "Limits.MemoryMax", "not a size"},
		{"negative size", "[Limits]\nTmpSize=-1\n", 2, "Limits.TmpSize", "not a size"},
		{"tasks overflow", "[Limits]\nTasksMax=99999999999999999999\n", 2, "Limits.TasksMax", "not a number"},
		{"tasks huge", "[Limits]\nTasksMax=4194305\n", 2, "Limits.TasksMax", "not a number"},
		{"tasks zero", "[Limits]\nTasksMax=0\n", 2, "Limits.TasksMax", "not a number"},
		{"cpu overflow", "[Limits]\nCPUQuota=18446744073709551616%\n", 2, "Limits.CPUQuota", "not a percentage"},
		{"cpu no percent", "[Limits]\nCPUQuota=200\n", 2, "Limits.CPUQuota", "not a percentage"},
		{"weight zero", "[Limits]\nCPUWeight=0\n", 2, "Limits.CPUWeight", "not a weight from 1 to 10000"},
		{"weight too high", "[Limits]\nCPUWeight=10001\n", 2, "Limits.CPUWeight", "not a weight"},
		{"weight not a number", "[Limits]\nCPUWeight=idle\n", 2, "Limits.CPUWeight", "not a weight"},
		{"duplicate weight", "[Limits]\nCPUWeight=10\nCPUWeight=20\n", 3, "Limits.CPUWeight", "set twice"},
		{"timeout too long", "[Limits]\nTimeout=99999999d\n", 2, "Limits.Timeout", "longer than"},
		{"relative path", "[Paths]\nReadWritePaths=srv/work\n", 2, "Paths.ReadWritePaths", "not an absolute path"},
		{"traversal", "[Paths]\nReadWritePaths=/srv/work/../../etc\n", 2, "Paths.ReadWritePaths", "not a clean path"},
		{"trailing slash", "[Paths]\nReadOnlyPaths=/srv/\n", 2, "Paths.ReadOnlyPaths", "not a clean path"},
		{"bad grant", "[Grants]\nAllow=example.com\n", 2, "Grants.Allow", "missing port"},
		{"ambiguous ip", "[Grants]\nAllow=0x7f000001:80\n", 2, "Grants.Allow", "ambiguous"},
		{"bad mcp", "[Grants]\nMCP=../etc\n", 2, "Grants.MCP", "may only hold"},
		{"bad user", "[Profile]\nUsers=al;ce\n", 2, "Profile.Users", "not a user"},
		{"star group", "[Profile]\nGroups=*\n", 2, "Profile.Groups", "not a user"},
		{"bad bool", "[Grants]\nNoNetwork=maybe\n", 2, "Grants.NoNetwork", "not a boolean"},
		{"nonetwork with grants", "[Grants]\nMCP=jira\nNoNetwork=yes\n", 3, "Grants.NoNetwork", "excludes"},
		{"nonetwork with per-run servers", "[Grants]\nPerRunMCP=yes\nNoNetwork=yes\n", 3, "Grants.NoNetwork", "PerRunMCP=yes"},
		{"duplicate PerRunMCP", "[Grants]\nPerRunMCP=no\nPerRunMCP=yes\n", 3, "Grants.PerRunMCP", "set twice"},
		{"control in description", "[Profile]\nDescription=a\x1bb\n", 2, "Profile.Description", "one line"},
		{"too many users", "[Profile]\n" + manyUsers(11, 100), 12, "Profile.Users", "more than"},
		{"syntax", "[Limits]\nMemoryMax\n", 2, "", "expected Key=Value"},
		{"before section", "MemoryMax=1G\n", 1, "", "before any"},
		{"line too long", "[Profile]\nDescription=" + strings.Repeat("x", 4000) + "\n", 0, "", "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("/etc/soda/sandbox/x.conf", "x", []byte(tt.in))
			var ce *serverconf.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse: error %v (%T), want a *config.Error", err, err)
			}
			if ce.File != "/etc/soda/sandbox/x.conf" || ce.Line != tt.line || ce.Key != tt.key || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("Parse: %v (line %d key %q), want line %d key %q containing %q", err, ce.Line, ce.Key, tt.line, tt.key, tt.contains)
			}
		})
	}
}

// manyUsers writes lines Users= lines of perLine distinct names each.
func manyUsers(lines, perLine int) string {
	var b strings.Builder
	for l := range lines {
		b.WriteString("Users=")
		for i := range perLine {
			fmt.Fprintf(&b, "u%d ", l*perLine+i)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestLoadAll(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"dev.conf":     devConf,
		"broken.conf":  "[Limits]\nMemoryMax=lots\n",
		"ci.conf":      "[Profile]\nGroups=ci\n",
		"notes.txt":    "not a profile",
		".hidden.conf": "[Profile]\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadAll(dir)
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"ci", "dev"}) {
		t.Fatalf("LoadAll: profiles %v, want [ci dev]", names)
	}
	if err == nil {
		t.Fatal("LoadAll: no error for broken.conf and .hidden.conf")
	}
	msg := err.Error()
	for _, want := range []string{filepath.Join(dir, "broken.conf") + ":2: Limits.MemoryMax:", ".hidden.conf", "must not start with '.'"} {
		if !strings.Contains(msg, want) {
			t.Errorf("LoadAll error %q lacks %q", msg, want)
		}
	}
	var ce *serverconf.Error
	if !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("LoadAll: the broken file's error is not a *config.Error with its line: %v", err)
	}

	if ps, err := LoadAll(filepath.Join(dir, "missing")); ps != nil || err != nil {
		t.Fatalf("LoadAll(missing dir) = %v, %v; want nothing", ps, err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dev.conf"), []byte(devConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.conf"), []byte("[Profile]\n"+strings.Repeat("# padding\n", maxFileSize/10+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.conf")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
	}{
		{"dev", ""},
		{"../dev", "may only hold"},
		{"", "1 to 64"},
		{"missing", "no such file"},
		{"big", "larger than"},
		{"zero", "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(dir, tt.name)
			if tt.want == "" {
				if err != nil || p.Name != "dev" {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load(%q): error %v, want %q", tt.name, err, tt.want)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	users := map[string]uint32{"alice": 1000, "bob": 1002}
	groups := map[string]uint32{"developers": 3000}
	fake := func(m map[string]uint32) func(string) (uint32, bool) {
		return func(s string) (uint32, bool) { id, ok := m[s]; return id, ok }
	}
	p, err := Parse("dev.conf", "dev", []byte("[Profile]\nUsers=alice 1001 ghost\nGroups=developers 2000 nogroup\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.lookupUser, p.lookupGroup = fake(users), fake(groups)
	star, _ := Parse("all.conf", "all", []byte("[Profile]\nUsers=*\n"))
	none, _ := Parse("none.conf", "none", nil)
	tests := []struct {
		name string
		p    *Profile
		uid  uint32
		gids []uint32
		want bool
	}{
		{"user by name", p, 1000, nil, true},
		{"user by number", p, 1001, []uint32{1001}, true},
		{"other user", p, 1002, []uint32{1002}, false},
		{"group by name", p, 1002, []uint32{1002, 3000}, true},
		{"group by number", p, 1003, []uint32{2000}, true},
		{"root is not special", p, 0, []uint32{0}, false},
		{"star", star, 4242, nil, true},
		{"empty profile", none, 1000, []uint32{1000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Allows(tt.uid, tt.gids); got != tt.want {
				t.Fatalf("Allows(%d, %v) = %v, want %v", tt.uid, tt.gids, got, tt.want)
			}
		})
	}
	// The real user database: root is uid 0 everywhere.
	r, _ := Parse("r.conf", "r", []byte("[Profile]\nUsers=root\nGroups=root\n"))
	if !r.Allows(0, nil) || r.Allows(1, []uint32{1}) || !r.Allows(5, []uint32{0}) {
		t.Fatal("Allows with the system's user database: Users=root does not match uid 0 only")
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{4 << 30: "4G", 1536 << 20: "1536M", 1000: "1000", 1 << 40: "1T", 3 << 10: "3K", 0: "0"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := serverconf.ParseBytes(FormatSize(n)); err != nil || back != n {
				t.Errorf("ParseBytes(FormatSize(%d)) = %d, %v", n, back, err)
			}
		}
	}
}

// TestDocumentedExamples parses the profile examples of the man page and
// the D-Bus API reference: what the documentation shows must load.
func TestDocumentedExamples(t *testing.T) {
	for _, f := range []struct{ file, fence string }{
		{"../../man/soda-profile.5.md", "```\n[Profile]"},
		{"../../docs/dbus-api.md", "```ini\n[Profile]"},
	} {
		data, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		i := strings.Index(s, f.fence)
		if i < 0 {
			t.Fatalf("%s: no profile example (%q)", f.file, f.fence)
		}
		body := s[i+strings.Index(f.fence, "\n")+1:]
		body = body[:strings.Index(body, "```")]
		p, err := Parse(f.file, "dev", []byte(body))
		if err != nil {
			t.Fatalf("%s: the example does not parse: %v", f.file, err)
		}
		if len(p.MCP) != 2 || p.Limits.MemoryMax != 4<<30 || len(p.ReadWritePaths) != 2 {
			t.Fatalf("%s: the example parsed as %+v", f.file, p)
		}
	}
}
