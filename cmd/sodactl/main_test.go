package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/version"
)

const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fixture lays out a config dir and a state dir in a temp directory:
//
//	conf/jira.conf    Listen=127.0.0.1:18101, TokenFile=state/jira.token (present)
//	conf/gh.conf      Listen=[::1]:18102, TokenFile=state/gh.token (absent)
//	conf/open.conf    Listen=localhost:18103, Auth=none
//	conf/broken.conf  invalid
//	conf/bad.conf     TokenFile=state/bad.token (malformed)
//	other.token       a token for --token-file
type fixture struct {
	root, conf, state string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := t.TempDir()
	f := fixture{root: root, conf: filepath.Join(root, "conf"), state: filepath.Join(root, "state")}
	for _, d := range []string{f.conf, f.state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(name, bridge string) {
		write(filepath.Join(f.conf, name+".conf"), "[Server]\nExecStart=/bin/cat\n\n[Bridge]\n"+bridge)
	}
	conf("jira", "Listen=127.0.0.1:18101\nTokenFile="+filepath.Join(f.state, "jira.token")+"\n")
	conf("gh", "Listen=[::1]:18102\nTokenFile="+filepath.Join(f.state, "gh.token")+"\n")
	conf("open", "Listen=localhost:18103\nAuth=none\n")
	conf("bad", "Listen=127.0.0.1:18104\nTokenFile="+filepath.Join(f.state, "bad.token")+"\n")
	write(filepath.Join(f.conf, "broken.conf"), "[Bridge]\nListen=10.0.0.1:80\n")
	write(filepath.Join(f.state, "jira.token"), tok+"\n")
	write(filepath.Join(f.state, "bad.token"), "hunter2\n")
	write(filepath.Join(root, "other.token"), strings.Repeat("f", 64))
	return f
}

func TestRun(t *testing.T) {
	f := newFixture(t)
	cd := "--config-dir=" + f.conf
	other := strings.Repeat("f", 64)
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string   // exact, unless empty and stdoutHas is set
		stdoutHas  []string // substrings
		stderrHas  []string
		stderrNone bool
	}{
		// Help and usage.
		{name: "no args", args: nil, code: 2, stderrHas: []string{"missing command", "sodactl --help"}},
		{name: "help", args: []string{"--help"}, code: 0, stdoutHas: []string{"Usage: sodactl", "mcp token NAME", "mcp client-config"}, stderrNone: true},
		{name: "version", args: []string{"--version"}, code: 0, stdout: "sodactl " + version.Version + "\n", stderrNone: true},
		{name: "-h", args: []string{"-h"}, code: 0, stdoutHas: []string{"Usage: sodactl"}},
		{name: "help command", args: []string{"help"}, code: 0, stdoutHas: []string{"Usage: sodactl"}},
		{name: "mcp help", args: []string{"mcp", "--help"}, code: 0, stdoutHas: []string{"sodactl mcp token [OPTIONS] NAME", "--client CLIENT", "/var/lib/soda/mcp/NAME.token"}, stderrNone: true},
		{name: "mcp token help", args: []string{"mcp", "token", "--help"}, code: 0, stdoutHas: []string{"Usage: sodactl mcp"}},
		{name: "mcp client-config help", args: []string{"mcp", "client-config", "jira", "-h"}, code: 0, stdoutHas: []string{"Usage: sodactl mcp"}},
		{name: "unknown command", args: []string{"frob"}, code: 2, stderrHas: []string{`unknown command "frob"`}},
		{name: "unknown flag", args: []string{"--frob"}, code: 2, stderrHas: []string{"frob", "sodactl --help"}},
		{name: "mcp alone", args: []string{"mcp"}, code: 2, stderrHas: []string{"missing command", "sodactl mcp --help"}},
		{name: "mcp unknown", args: []string{"mcp", "frobnicate"}, code: 2, stderrHas: []string{`unknown command "frobnicate"`}},
		{name: "token no name", args: []string{"mcp", "token"}, code: 2, stderrHas: []string{"missing server NAME", "sodactl mcp token --help"}},
		{name: "token two names", args: []string{"mcp", "token", "a", "b"}, code: 2, stderrHas: []string{"too many arguments: b"}},
		{name: "token bad name", args: []string{"mcp", "token", "../etc"}, code: 2, stderrHas: []string{"may only hold"}},
		{name: "token flag missing value", args: []string{"mcp", "token", "jira", "--token-file"}, code: 2, stderrHas: []string{"token-file"}},

		// mcp token.
		{name: "token", args: []string{"mcp", "token", cd, "jira"}, code: 0, stdout: tok + "\n", stderrNone: true},
		{name: "token global flag first", args: []string{cd, "mcp", "token", "jira"}, code: 0, stdout: tok + "\n"},
		{name: "token flag after mcp", args: []string{"mcp", cd, "token", "jira"}, code: 0, stdout: tok + "\n"},
		{name: "token flag after name", args: []string{"mcp", "token", "jira", "--config-dir", f.conf}, code: 0, stdout: tok + "\n"},
		{name: "token single dash flag", args: []string{"mcp", "token", "-config-dir", f.conf, "jira"}, code: 0, stdout: tok + "\n"},
		{name: "token --token-file", args: []string{"mcp", "token", "--token-file", filepath.Join(f.root, "other.token"), "jira"}, code: 0, stdout: other + "\n"},
		{name: "token --token-file no config", args: []string{"--config-dir", filepath.Join(f.root, "nowhere"), "mcp", "token", "--token-file=" + filepath.Join(f.root, "other.token"), "x"}, code: 0, stdout: other + "\n"},
		{name: "token after --", args: []string{"mcp", "token", cd, "--", "jira"}, code: 0, stdout: tok + "\n"},
		{name: "token absent", args: []string{"mcp", "token", cd, "gh"}, code: 1, stderrHas: []string{
			"no token yet", filepath.Join(f.state, "gh.token"), "systemctl start soda-mcp@gh", "soda-mcpd gh"}},
		{name: "token absent and unconfigured", args: []string{"mcp", "token", cd, "zz-soda-test-none"}, code: 1, stderrHas: []string{
			"no token yet", "/var/lib/soda/mcp/zz-soda-test-none.token", "systemctl start soda-mcp@zz-soda-test-none",
			filepath.Join(f.conf, "zz-soda-test-none.conf") + " does not exist either"}},
		{name: "token malformed", args: []string{"mcp", "token", cd, "bad"}, code: 1, stderrHas: []string{filepath.Join(f.state, "bad.token"), "delete"}},
		{name: "token auth none", args: []string{"mcp", "token", cd, "open"}, code: 1, stderrHas: []string{"Auth=none", filepath.Join(f.conf, "open.conf")}},
		{name: "token broken config", args: []string{"mcp", "token", cd, "broken"}, code: 1, stderrHas: []string{"invalid configuration", filepath.Join(f.conf, "broken.conf")}},

		// mcp client-config.
		{name: "claude", args: []string{"mcp", "client-config", cd, "jira", "--client", "claude"}, code: 0,
			stdout:    `claude mcp add --transport http jira http://127.0.0.1:18101/mcp --header "Authorization: Bearer ` + tok + `"` + "\n",
			stderrHas: []string{"shell"}},
		{name: "codex", args: []string{"mcp", "client-config", "--client=codex", cd, "jira"}, code: 0,
			stdout:    "[mcp_servers.jira]\nurl = \"http://127.0.0.1:18101/mcp\"\nhttp_headers = { \"Authorization\" = \"Bearer " + tok + "\" }\n",
			stderrHas: []string{"~/.codex/config.toml"}},
		{name: "opencode", args: []string{cd, "mcp", "client-config", "jira", "-client", "opencode"}, code: 0,
			stdoutHas: []string{`"$schema": "https://opencode.ai/config.json"`, `"type": "remote"`, `"url": "http://127.0.0.1:18101/mcp"`, `"Authorization": "Bearer ` + tok + `"`},
			stderrHas: []string{"opencode.json"}},
		{name: "vscode", args: []string{"mcp", "client-config", "jira", "--client", "vscode", cd}, code: 0,
			stdoutHas: []string{`"servers"`, `"type": "http"`, `"url": "http://127.0.0.1:18101/mcp"`, `"Authorization": "Bearer ` + tok + `"`},
			stderrHas: []string{".vscode/mcp.json"}},
		{name: "ipv6 listen", args: []string{"mcp", "client-config", cd, "gh", "--client", "vscode", "--token-file", filepath.Join(f.root, "other.token")}, code: 0,
			stdoutHas: []string{`"url": "http://[::1]:18102/mcp"`, "Bearer " + other}},
		{name: "auth none", args: []string{"mcp", "client-config", cd, "open", "--client", "codex"}, code: 0,
			stdout:    "[mcp_servers.open]\nurl = \"http://localhost:18103/mcp\"\n",
			stderrHas: []string{"Auth=none"}},
		{name: "client-config token absent", args: []string{"mcp", "client-config", cd, "gh", "--client", "claude"}, code: 1,
			stderrHas: []string{"no token yet", "systemctl start soda-mcp@gh"}},
		{name: "client-config no config", args: []string{"mcp", "client-config", cd, "nope", "--client", "claude"}, code: 1,
			stderrHas: []string{filepath.Join(f.conf, "nope.conf"), "does not exist", "assuming an ad-hoc soda-mcpd", "no token yet"}},
		{name: "client-config broken config", args: []string{"mcp", "client-config", cd, "broken", "--client", "claude"}, code: 1,
			stderrHas: []string{"Bridge.Listen", "loopback"}},
		{name: "client-config no client", args: []string{"mcp", "client-config", cd, "jira"}, code: 2,
			stderrHas: []string{"missing --client", "claude, codex, opencode, vscode"}},
		{name: "client-config bad client", args: []string{"mcp", "client-config", cd, "jira", "--client", "cursor"}, code: 2,
			stderrHas: []string{`unknown client "cursor"`}},
		{name: "client-config no name", args: []string{"mcp", "client-config", "--client", "claude"}, code: 2,
			stderrHas: []string{"missing server NAME"}},
		{name: "client flag on token", args: []string{"mcp", "token", "--client", "claude", "jira"}, code: 2,
			stderrHas: []string{"client"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			if tt.stdout != "" && stdout.String() != tt.stdout {
				t.Errorf("stdout:\n%q\nwant:\n%q", stdout.String(), tt.stdout)
			}
			if tt.code != 0 && stdout.Len() != 0 {
				t.Errorf("failed command wrote to stdout: %q", stdout.String())
			}
			for _, s := range tt.stdoutHas {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout does not contain %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not contain %q:\n%s", s, stderr.String())
				}
			}
			if tt.stderrNone && stderr.Len() != 0 {
				t.Errorf("unexpected stderr: %s", stderr.String())
			}
			if strings.Contains(stderr.String(), tok) {
				t.Errorf("the token leaked to stderr: %s", stderr.String())
			}
		})
	}
}

// TestTokenNeverCreated checks that sodactl only reads token files.
func TestTokenNeverCreated(t *testing.T) {
	f := newFixture(t)
	var stdout, stderr bytes.Buffer
	for _, args := range [][]string{
		{"--config-dir", f.conf, "mcp", "token", "gh"},
		{"--config-dir", f.conf, "mcp", "client-config", "gh", "--client", "claude"},
	} {
		run(args, &stdout, &stderr)
		if _, err := os.Stat(filepath.Join(f.state, "gh.token")); !os.IsNotExist(err) {
			t.Fatalf("%v created the token file (stat: %v)", args, err)
		}
	}
}

func TestTokenPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("host lacks: an unprivileged uid for this test (it runs as root, and root reads any file)")
	}
	f := newFixture(t)
	path := filepath.Join(f.state, "jira.token")
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--config-dir", f.conf, "mcp", "token", "jira"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "permission denied") || !strings.Contains(stderr.String(), "root") {
		t.Errorf("stderr %q does not explain the permission problem", stderr.String())
	}
}

// TestServerStartedByHand: a soda-mcpd started without a NAME.conf (the
// README's "make run": soda-mcpd --name everything --listen
// 127.0.0.1:18100 --token-file ... -- COMMAND) is found by its runtime
// record, so that every command accepts it, "run --mcp" included; a
// record left by a killed soda-mcpd is not.
func TestServerStartedByHand(t *testing.T) {
	f := newFixture(t)
	rdir := filepath.Join(f.root, "run")
	if err := os.Mkdir(rdir, 0o755); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(f.state, "jira.token") // holds tok
	start, err := runstate.ProcStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	writeRec := func(name string, r runstate.Record) {
		t.Helper()
		if err := runstate.Write(filepath.Join(rdir, runstate.FileName(name)), r); err != nil {
			t.Fatal(err)
		}
	}
	writeRec("everything", runstate.Record{PID: os.Getpid(), Start: start, Name: "everything",
		Listen: []string{"127.0.0.1:18100"}, Auth: true, TokenFile: tokFile, Sessions: 2, Children: 2})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	writeRec("gone", runstate.Record{PID: dead.Process.Pid, Name: "gone", Listen: []string{"127.0.0.1:18109"}, Auth: true, TokenFile: tokFile})

	dirs := []string{"--config-dir", f.conf, "--runtime-dir", rdir}
	tests := []struct {
		name      string
		args      []string
		code      int
		stdoutHas []string
		stderrHas []string
	}{
		{name: "status", args: append([]string{"mcp", "status", "everything"}, dirs...), code: 0, stdoutHas: []string{
			"soda-mcp@everything", "config:   none (started by hand; " + filepath.Join(rdir, "everything.status.json") + ")",
			"url:      http://127.0.0.1:18100/mcp", "token:    " + tokFile, fmt.Sprintf("pid:      %d", os.Getpid()), "sessions: 2"}},
		{name: "token", args: append([]string{"mcp", "token", "everything"}, dirs...), code: 0, stdoutHas: []string{tok}},
		{name: "client-config", args: append([]string{"mcp", "client-config", "everything", "--client", "claude"}, dirs...), code: 0,
			stdoutHas: []string{"claude mcp add --transport http everything http://127.0.0.1:18100/mcp", "Bearer " + tok},
			stderrHas: []string{"using the running soda-mcpd everything (pid"}},
		{name: "list", args: append([]string{"mcp", "list"}, dirs...), code: 0, stdoutHas: []string{"everything  127.0.0.1:18100", "jira"}},
		{name: "status stale", args: append([]string{"mcp", "status", "gone"}, dirs...), code: 1, stderrHas: []string{"stale: process"}},
		{name: "run stale", args: append([]string{"run", "--mcp", "gone"}, append(dirs, "--", "true")...), code: 125, stderrHas: []string{"--mcp gone: no server", "stale: process"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			for _, s := range tt.stdoutHas {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
		})
	}
	if strings.Contains(func() string {
		var o, e bytes.Buffer
		run(append([]string{"mcp", "list"}, dirs...), &o, &e)
		return o.String()
	}(), "gone") {
		t.Error("mcp list shows the stale record of a killed soda-mcpd")
	}

	// The grant itself: the port relayed into the sandbox and the entry
	// written into the agent's configuration.
	servers, err := mcpGrants(&options{configDir: f.conf, runtimeDirs: []string{rdir}}, []string{"everything"})
	if err != nil {
		t.Fatalf("mcpGrants: %v", err)
	}
	if len(servers) != 1 || servers[0].Port != 18100 || servers[0].Entry.URL != "http://127.0.0.1:18100/mcp" || servers[0].Entry.Token != tok {
		t.Errorf("grant = %+v", servers)
	}
}
