package generator

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	conf := t.TempDir()
	out := t.TempDir()
	files := map[string]string{
		"jira.conf":     "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18101\nStartOnBoot=yes\n",
		"github.conf":   "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18102\n",
		"broken.conf":   "[Server]\nExecStart=/bin/true\nNoSuchKey=1\n",
		"a.conf":        "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18200\n",
		"b.conf":        "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=[::1]:18200\n",
		"notconf.txt":   "ignored",
		"local.conf":    "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=localhost:18300\n",
		"zeroport.conf": "[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:0\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs []string
	res, err := Generate(Options{ConfigDir: conf, OutputDir: out, TemplateUnit: "/usr/lib/systemd/system/soda-mcp@.socket"},
		func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Generated)
	if want := []string{"github", "jira", "local"}; !slices.Equal(res.Generated, want) {
		t.Fatalf("generated %v, want %v", res.Generated, want)
	}
	dropin, err := os.ReadFile(filepath.Join(out, "soda-mcp@jira.socket.d", "50-listen.conf"))
	if err != nil || !strings.Contains(string(dropin), "ListenStream=127.0.0.1:18101") {
		t.Fatalf("jira drop-in: %v %s", err, dropin)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "soda-mcp@local.socket.d", "50-listen.conf")); !strings.Contains(string(b), "ListenStream=127.0.0.1:18300") {
		t.Fatalf("localhost not mapped to 127.0.0.1: %s", b)
	}
	if target, err := os.Readlink(filepath.Join(out, "sockets.target.wants", "soda-mcp@jira.socket")); err != nil || target != "/usr/lib/systemd/system/soda-mcp@.socket" {
		t.Fatalf("jira not enabled: %v %q", err, target)
	}
	if _, err := os.Lstat(filepath.Join(out, "sockets.target.wants", "soda-mcp@github.socket")); err == nil {
		t.Fatal("github enabled without StartOnBoot=yes")
	}
	all := strings.Join(logs, "\n")
	for _, want := range []string{
		"broken.conf:3: Server.NoSuchKey",
		filepath.Join(conf, "a.conf") + ": port 18200 is also asked for by " + filepath.Join(conf, "b.conf"),
		filepath.Join(conf, "b.conf") + ": port 18200 is also asked for by " + filepath.Join(conf, "a.conf"),
		"zeroport.conf: Listen=127.0.0.1:0",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("log lacks %q:\n%s", want, all)
		}
	}
	for _, n := range []string{"a", "b", "broken"} {
		if _, err := os.Stat(filepath.Join(out, "soda-mcp@"+n+".socket.d")); err == nil {
			t.Errorf("drop-in written for refused instance %s", n)
		}
	}
}

func TestGenerateMissingConfigDir(t *testing.T) {
	res, err := Generate(Options{ConfigDir: "/nonexistent", OutputDir: t.TempDir()}, func(string, ...any) {})
	if err != nil || len(res.Generated) != 0 {
		t.Fatalf("got %v, %v", res, err)
	}
}

// TestValidateKinds: a kind with [Listener] Listen= gets the listen
// drop-in of soda-validate@KIND.socket; one without is stdio only; a port
// another server asks for is refused for both.
func TestValidateKinds(t *testing.T) {
	mcp, val, out := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(val, "shellcheck.conf", "[Validator]\nExecStart=/usr/bin/shellcheck %FILES%\nFiles=*.sh\n[Listener]\nListen=127.0.0.1:18120\n")
	write(val, "stdio.conf", "[Validator]\nExecStart=/usr/bin/true %FILES%\nFiles=*.x\n")
	write(val, "clash.conf", "[Listener]\nListen=127.0.0.1:18121\n")
	write(val, "public.conf", "[Listener]\nListen=0.0.0.0:18122\n")
	write(mcp, "jira.conf", "[Server]\nExecStart=/bin/cat\n[Bridge]\nListen=127.0.0.1:18121\n")
	var logs []string
	res, err := Generate(Options{ConfigDir: mcp, OutputDir: out, ValidateDir: val, TemplateUnit: "/x"}, func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "soda-validate@shellcheck.socket.d", "50-listen.conf"))
	if err != nil || !strings.Contains(string(b), "ListenStream=127.0.0.1:18120") {
		t.Errorf("shellcheck's drop-in: %q, %v", b, err)
	}
	for _, name := range []string{"soda-validate@stdio.socket.d", "soda-validate@clash.socket.d", "soda-mcp@jira.socket.d", "soda-validate@public.socket.d"} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			t.Errorf("%s generated; want none (%v)", name, logs)
		}
	}
	if !slices.Contains(res.Generated, "shellcheck") {
		t.Errorf("generated %v", res.Generated)
	}
}

// TestSandboxSliceDropIn: soda-sandbox.slice gets a CPU quota of the
// host's CPUs but one, at least one CPU, as each sandbox's own default.
func TestSandboxSliceDropIn(t *testing.T) {
	for _, tt := range []struct {
		ncpu int
		want string
	}{
		{1, "CPUQuota=100%"},
		{2, "CPUQuota=100%"},
		{3, "CPUQuota=200%"},
		{4, "CPUQuota=300%"},
		{16, "CPUQuota=1500%"},
		{256, "CPUQuota=25500%"},
	} {
		body := SandboxSliceDropIn(tt.ncpu)
		var quota []string
		for l := range strings.SplitSeq(body, "\n") {
			if strings.HasPrefix(l, "CPUQuota=") {
				quota = append(quota, l)
			}
		}
		if !slices.Equal(quota, []string{tt.want}) {
			t.Errorf("%d CPUs: the drop-in sets %v, want %s:\n%s", tt.ncpu, quota, tt.want, body)
		}
		if !strings.Contains(body, "\n[Slice]\n") || !strings.HasPrefix(body, "# ") {
			t.Errorf("%d CPUs: not a commented [Slice] drop-in:\n%s", tt.ncpu, body)
		}
	}
}

// TestGenerateSandboxSlice: the slice's drop-in is written for the system
// manager and for users' managers, which get nothing else (the MCP and
// validation sockets are the system's); an administrator's drop-in that
// sets CPUQuota= wins, whatever its name, and one that does not leaves
// ours.
func TestGenerateSandboxSlice(t *testing.T) {
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "jira.conf"), []byte("[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18101\nStartOnBoot=yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const dropIn = "soda-sandbox.slice.d/" + SandboxSliceDropInName
	for _, tt := range []struct {
		name  string
		user  bool
		admin map[string]string // the administrator's drop-ins
		slice bool              // ours is written
	}{
		{name: "system", slice: true},
		{name: "user", user: true, slice: true},
		{name: "admin weight only", admin: map[string]string{"cpu.conf": "[Slice]\nCPUWeight=20\n"}, slice: true},
		{name: "admin quota", admin: map[string]string{"cpu.conf": "[Slice]\nCPUQuota=150%\n"}},
		{name: "admin quota sorting first", admin: map[string]string{"00-a.conf": "[Slice]\n  CPUQuota = 50%\n"}},
		{name: "admin quota reset", user: true, admin: map[string]string{"zz.conf": "[Slice]\nCPUQuota=\n"}},
		{name: "admin quota commented out", admin: map[string]string{"x.conf": "[Slice]\n# CPUQuota=50%\n;CPUQuota=50%\n"}, slice: true},
		{name: "admin quota not a drop-in", admin: map[string]string{"x.conf.bak": "[Slice]\nCPUQuota=50%\n"}, slice: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, admin := t.TempDir(), t.TempDir()
			for n, body := range tt.admin {
				if err := os.WriteFile(filepath.Join(admin, n), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var logs []string
			_, err := Generate(Options{ConfigDir: conf, OutputDir: out, TemplateUnit: "/x", NumCPU: 4, User: tt.user, SliceAdminDir: admin},
				func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(out, dropIn))
			switch {
			case tt.slice && (err != nil || !strings.Contains(string(b), "CPUQuota=300%")):
				t.Errorf("%s: %q, %v; want CPUQuota=300%%", dropIn, b, err)
			case !tt.slice && err == nil:
				t.Errorf("%s written over the administrator's CPUQuota=: %s", dropIn, b)
			}
			_, err = os.Stat(filepath.Join(out, "soda-mcp@jira.socket.d"))
			if tt.user && err == nil {
				t.Error("a user's manager got the system's soda-mcp@jira.socket drop-in")
			}
			if !tt.user && err != nil {
				t.Errorf("the system manager lacks soda-mcp@jira.socket's drop-in: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(out, "sockets.target.wants")); tt.user && err == nil {
				t.Error("a user's manager got the system's sockets.target.wants")
			}
		})
	}
	// NumCPU 0 (unknown): no slice drop-in.
	out := t.TempDir()
	if _, err := Generate(Options{ConfigDir: conf, OutputDir: out, TemplateUnit: "/x"}, func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, dropIn)); err == nil {
		t.Error("a slice drop-in without a CPU count")
	}
}
