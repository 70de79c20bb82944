package profile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// narrowFixture is a profile over a temporary tree:
//
//	root/work        ReadWritePaths (named through the link root/worklink)
//	root/work/proj   a project
//	root/work/evil   a symbolic link to root/secret
//	root/ref         ReadOnlyPaths
//	root/secret      outside the profile
func narrowFixture(t *testing.T) (*Profile, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"work/proj/sub", "ref/docs", "secret", "workdata"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "work", "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "work"), filepath.Join(root, "worklink")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "work", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := strings.ReplaceAll(`[Grants]
MCP=jira github
Allow=api.github.com:443 *.example.com:443
AllowPrivate=gitlab.internal:443
[Paths]
ReadWritePaths=ROOT/worklink ROOT/missing
ReadOnlyPaths=ROOT/ref
[Limits]
MemoryMax=4G
TasksMax=512
CPUQuota=200%
Timeout=8h
`, "ROOT", root)
	p, err := Parse("dev.conf", "dev", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return p, root
}

func TestNarrow(t *testing.T) {
	p, root := narrowFixture(t)
	g := func(s string) egress.Grant { return mustGrant(t, s, false) }
	gp := func(s string) egress.Grant { return mustGrant(t, s, true) }
	work := filepath.Join(root, "work")
	tests := []struct {
		name string
		req  Request
		want Request
	}{
		{
			name: "empty request takes the profile's grants and ceilings, no paths",
			req:  Request{},
			want: Request{
				MCP:    []string{"jira", "github"},
				Allow:  []egress.Grant{g("api.github.com:443"), g("*.example.com:443"), gp("gitlab.internal:443")},
				Limits: Limits{MemoryMax: 4 << 30, TasksMax: 512, CPUPercent: 200, CPUWeight: 100, Timeout: 8 * time.Hour, TmpSize: 512 << 20, HomeSize: 512 << 20, WorkspaceSize: 512 << 20},
			},
		},
		{
			name: "a narrower request stays as asked",
			req: Request{
				MCP:       []string{"jira", "jira"},
				Allow:     []egress.Grant{g("example.com:443"), g("a.b.example.com:443"), g("*.b.example.com:443"), g("gitlab.internal:443")},
				ReadWrite: []string{work + "/proj"},
				ReadOnly:  []string{filepath.Join(root, "ref/docs"), work},
				Limits:    Limits{MemoryMax: 1 << 30, TasksMax: 512, CPUPercent: 50, CPUWeight: 10, Timeout: time.Hour, TmpSize: 1 << 20, HomeSize: 256 << 20, WorkspaceSize: 512 << 20},
			},
			want: Request{
				MCP:       []string{"jira"},
				Allow:     []egress.Grant{g("example.com:443"), g("a.b.example.com:443"), g("*.b.example.com:443"), g("gitlab.internal:443")},
				ReadWrite: []string{work + "/proj"},
				ReadOnly:  []string{filepath.Join(root, "ref/docs"), work},
				Limits:    Limits{MemoryMax: 1 << 30, TasksMax: 512, CPUPercent: 50, CPUWeight: 10, Timeout: time.Hour, TmpSize: 1 << 20, HomeSize: 256 << 20, WorkspaceSize: 512 << 20},
			},
		},
		{
			name: "empty lists grant nothing",
			req:  Request{MCP: []string{}, Allow: []egress.Grant{}},
			want: Request{MCP: []string{}, Allow: []egress.Grant{}, Limits: Limits{MemoryMax: 4 << 30, TasksMax: 512, CPUPercent: 200, CPUWeight: 100, Timeout: 8 * time.Hour, TmpSize: 512 << 20, HomeSize: 512 << 20, WorkspaceSize: 512 << 20}},
		},
		{
			name: "no network",
			req:  Request{NoNetwork: true},
			want: Request{NoNetwork: true, MCP: []string{}, Allow: []egress.Grant{}, Limits: Limits{MemoryMax: 4 << 30, TasksMax: 512, CPUPercent: 200, CPUWeight: 100, Timeout: 8 * time.Hour, TmpSize: 512 << 20, HomeSize: 512 << 20, WorkspaceSize: 512 << 20}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Narrow(tt.req)
			if err != nil {
				t.Fatalf("Narrow: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Narrow:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}

	// The effective request does not alias the profile.
	got, _ := p.Narrow(Request{})
	got.MCP[0], got.Allow[0].Port = "changed", 1
	if p.MCP[0] != "jira" || p.Allow[0].Port != 443 {
		t.Fatal("Narrow's result aliases the profile's lists")
	}
}

func TestNarrowExceeds(t *testing.T) {
	p, root := narrowFixture(t)
	g := func(s string) egress.Grant { return mustGrant(t, s, false) }
	tests := []struct {
		name string
		req  Request
		key  string
		msg  string
	}{
		{"memory", Request{Limits: Limits{MemoryMax: 8 << 30}}, "MemoryMax", "MemoryMax 8G exceeds profile dev's ceiling 4G"},
		{"memory by a byte", Request{Limits: Limits{MemoryMax: 4<<30 + 1}}, "MemoryMax", "MemoryMax 4294967297 exceeds profile dev's ceiling 4G"},
		{"tasks", Request{Limits: Limits{TasksMax: 513}}, "TasksMax", "TasksMax 513 exceeds profile dev's ceiling 512"},
		{"tmp over the default ceiling", Request{Limits: Limits{TmpSize: 1536 << 20}}, "TmpSize", "TmpSize 1536M exceeds profile dev's ceiling 512M"},
		{"cpu", Request{Limits: Limits{CPUPercent: 400}}, "CPUQuota", "CPUQuota 400% exceeds profile dev's ceiling 200%"},
		{"cpu weight over the default ceiling", Request{Limits: Limits{CPUWeight: 200}}, "CPUWeight", "CPUWeight 200 exceeds profile dev's ceiling 100"},
		{"timeout", Request{Limits: Limits{Timeout: 9*time.Hour + 30*time.Minute}}, "Timeout", "Timeout 9h 30min exceeds profile dev's ceiling 8h"},
		{"mcp", Request{MCP: []string{"github", "postgres"}}, "MCP", "MCP postgres is not granted by profile dev (MCP=jira github)"},
		{"host", Request{Allow: []egress.Grant{g("evil.com:443")}}, "Allow", "Allow evil.com:443 is not granted by profile dev (Allow=api.github.com:443 *.example.com:443, AllowPrivate=gitlab.internal:443)"},
		{"port", Request{Allow: []egress.Grant{g("api.github.com:80")}}, "Allow", "Allow api.github.com:80 is not granted"},
		{"wildcard wider than exact", Request{Allow: []egress.Grant{g("*.github.com:443")}}, "Allow", "Allow *.github.com:443 is not granted"},
		{"suffix trick", Request{Allow: []egress.Grant{g("badexample.com:443")}}, "Allow", "Allow badexample.com:443 is not granted"},
		{"private not granted", Request{Allow: []egress.Grant{mustGrant(t, "api.github.com:443", true)}}, "Allow", "Allow api.github.com:443 (private) is not granted"},
		{"rw outside", Request{ReadWrite: []string{filepath.Join(root, "secret")}}, "ReadWritePaths", "ReadWritePaths " + filepath.Join(root, "secret") + " is not inside profile dev's ReadWritePaths"},
		{"rw in a read-only dir", Request{ReadWrite: []string{filepath.Join(root, "ref/docs")}}, "ReadWritePaths", "is not inside profile dev's ReadWritePaths"},
		{"prefix is not inside", Request{ReadWrite: []string{filepath.Join(root, "workdata")}}, "ReadWritePaths", "is not inside"},
		{"ro outside", Request{ReadOnly: []string{filepath.Join(root, "secret")}}, "ReadOnlyPaths", "is not inside profile dev's ReadWritePaths/ReadOnlyPaths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := p.Narrow(tt.req)
			var ee *ExceedsError
			if !errors.As(err, &ee) {
				t.Fatalf("Narrow: error %v (%T), want an *ExceedsError", err, err)
			}
			if len(ee.Excesses) != 1 || ee.Excesses[0].Key != tt.key || !strings.Contains(err.Error(), tt.msg) || ee.Profile != "dev" {
				t.Fatalf("Narrow: %+v, want one excess of %s saying %q", ee, tt.key, tt.msg)
			}
			// What was asked is in the returned request (for an
			// authorization beyond the profile).
			if tt.req.Limits.MemoryMax != 0 && out.Limits.MemoryMax != tt.req.Limits.MemoryMax {
				t.Fatalf("Narrow: the returned request lost the excess: %+v", out.Limits)
			}
		})
	}

	// Every excess is named at once.
	_, err := p.Narrow(Request{MCP: []string{"x"}, Limits: Limits{MemoryMax: 8 << 30, TasksMax: 9999}, ReadWrite: []string{filepath.Join(root, "secret")}})
	var ee *ExceedsError
	if !errors.As(err, &ee) || len(ee.Excesses) != 4 {
		t.Fatalf("Narrow with four excesses: %v", err)
	}
}

// TestNarrowHostile: malformed requests are refused as such, not as
// excesses (nothing a daemon could authorize).
func TestNarrowHostile(t *testing.T) {
	p, root := narrowFixture(t)
	work := filepath.Join(root, "work")
	tests := []struct {
		name string
		req  Request
		msg  string
	}{
		{"traversal", Request{ReadWrite: []string{work + "/../secret"}}, "not a clean path"},
		{"traversal in ro", Request{ReadOnly: []string{work + "/proj/../../secret"}}, "not a clean path"},
		{"relative", Request{ReadWrite: []string{"work/proj"}}, "not an absolute path"},
		{"dot", Request{ReadWrite: []string{work + "/./proj"}}, "not a clean path"},
		{"trailing slash", Request{ReadWrite: []string{work + "/"}}, "not a clean path"},
		{"empty", Request{ReadWrite: []string{""}}, "empty path"},
		{"nul", Request{ReadWrite: []string{work + "\x00/x"}}, "NUL"},
		{"huge", Request{ReadWrite: []string{"/" + strings.Repeat("a", 5000)}}, "longer than"},
		{"symlink inside the profile dir to outside", Request{ReadWrite: []string{work + "/evil"}}, "is a symbolic link to " + filepath.Join(root, "secret")},
		{"the profile's own link is not a request's", Request{ReadWrite: []string{filepath.Join(root, "worklink", "proj")}}, "is a symbolic link"},
		{"missing", Request{ReadWrite: []string{work + "/nothere"}}, "no such file"},
		{"file", Request{ReadWrite: []string{work + "/file"}}, "not a directory"},
		{"negative memory", Request{Limits: Limits{MemoryMax: -1}}, "negative"},
		{"negative timeout", Request{Limits: Limits{Timeout: -time.Second}}, "negative"},
		{"cpu overflow", Request{Limits: Limits{CPUPercent: 1 << 63}}, "above"},
		{"cpu weight overflow", Request{Limits: Limits{CPUWeight: 10001}}, "above 10000"},
		{"bad mcp", Request{MCP: []string{"../../etc/passwd"}}, "MCP"},
		{"unnormalised grant", Request{Allow: []egress.Grant{{Host: "EVIL.com", Port: 443}}}, "not a valid grant"},
		{"zero port", Request{Allow: []egress.Grant{{Host: "a.com"}}}, "not a valid grant"},
		{"no network with grants", Request{NoNetwork: true, MCP: []string{"jira"}}, "excludes"},
		{"too many", Request{MCP: make([]string, maxListLen+1)}, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Narrow(tt.req)
			var ee *ExceedsError
			if err == nil || errors.As(err, &ee) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Narrow: error %v, want a plain error containing %q", err, tt.msg)
			}
		})
	}
}

func TestNarrowNoNetworkProfile(t *testing.T) {
	p, err := Parse("offline.conf", "offline", []byte("[Grants]\nNoNetwork=yes\n[Limits]\nMemoryMax=1G\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Narrow(Request{})
	if err != nil || !out.NoNetwork || len(out.MCP) != 0 || len(out.Allow) != 0 || out.Limits.MemoryMax != 1<<30 {
		t.Fatalf("Narrow(empty) of a NoNetwork profile = %+v, %v", out, err)
	}
	_, err = p.Narrow(Request{MCP: []string{"jira"}})
	if err == nil || !strings.Contains(err.Error(), "MCP jira is refused: profile offline has NoNetwork=yes") {
		t.Fatalf("Narrow(MCP) of a NoNetwork profile: %v", err)
	}
	// No directories: every path exceeds.
	dir := t.TempDir()
	_, err = p.Narrow(Request{ReadOnly: []string{dir}})
	if err == nil || !strings.Contains(err.Error(), "it grants none") {
		t.Fatalf("Narrow(ReadOnly %s) of a profile without paths: %v", dir, err)
	}
	// What the engine never grants is refused as such, profile or not.
	_, err = p.Narrow(Request{ReadOnly: []string{"/"}})
	if err == nil || !strings.Contains(err.Error(), "/ may not be granted to a sandbox") {
		t.Fatalf("Narrow(ReadOnly /): %v", err)
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		profile, req string
		pp, rp       bool
		want         bool
	}{
		{"a.com:1", "a.com:1", false, false, true},
		{"a.com:1", "a.com:2", false, false, false},
		{"a.com:1", "b.a.com:1", false, false, false},
		{"*.a.com:1", "a.com:1", false, false, true},
		{"*.a.com:1", "b.a.com:1", false, false, true},
		{"*.a.com:1", "*.b.a.com:1", false, false, true},
		{"*.a.com:1", "*.a.com:1", false, false, true},
		{"*.b.a.com:1", "*.a.com:1", false, false, false},
		{"*.a.com:1", "ba.com:1", false, false, false},
		{"*.a.com:1", "a.com.evil:1", false, false, false},
		{"a.com:1", "a.com:1", true, false, true},
		{"a.com:1", "a.com:1", false, true, false},
		{"10.0.0.1:22", "10.0.0.1:22", true, true, true},
	}
	for _, tt := range tests {
		pg, rg := mustGrant(t, tt.profile, tt.pp), mustGrant(t, tt.req, tt.rp)
		if got := covers(pg, rg); got != tt.want {
			t.Errorf("covers(%v private=%v, %v private=%v) = %v, want %v", tt.profile, tt.pp, tt.req, tt.rp, got, tt.want)
		}
	}
}
