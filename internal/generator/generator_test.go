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
