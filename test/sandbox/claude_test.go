package sandboxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// byHandPort is the loopback port, inside the box, of the soda-mcpd that
// TestClaudeCode starts by hand (no NAME.conf), as "make run" does.
const byHandPort = 18444

// claudeCLI installs the real Claude Code CLI (test/sandbox/claude-code,
// pinned in its package-lock.json) on the host, in the repository that is
// bound into the box, and returns the path of its claude command.
func (e *env) claudeCLI(t *testing.T) string {
	t.Helper()
	dir := e.npmPackage(t, "claude-code", "ci")
	claude := filepath.Join(dir, "node_modules", ".bin", "claude")
	if _, err := os.Stat(claude); err != nil {
		t.Fatalf("npm installed no claude: %v", err)
	}
	return claude
}

// npmPackage installs test/sandbox/NAME with npm VERB (ci, or install
// where the lock file cannot serve npm ci) unless it is installed and as
// new as its lock file (npm writes node_modules/.package-lock.json), as
// the Makefile's deps-test checks; it returns the package's directory.
func (e *env) npmPackage(t *testing.T, name, verb string) string {
	t.Helper()
	dir := filepath.Join(e.repo, "test", "sandbox", name)
	lock, lerr := os.Stat(filepath.Join(dir, "package-lock.json"))
	inst, ierr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if lerr == nil && ierr == nil && !inst.ModTime().Before(lock.ModTime()) {
		return dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("host lacks: npm not found, cannot install test/sandbox/%s: %v", name, err)
	}
	out, err := exec.Command(npm, verb, "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput()
	if err != nil {
		t.Fatalf("npm %s --prefix %s: %v\n%s", verb, dir, err, out)
	}
	return dir
}

// TestClaudeCode runs the real Claude Code CLI in the sandbox with MCP
// grants, as a new user does (issue 8, section 6):
//
//   - its own arguments reach it: "sodactl run --mcp NAME -- claude 'fix
//     the bug'" used to insert "--mcp-config FILE", and the variadic option
//     took the prompt (or "mcp list") for more config files;
//   - "claude mcp list" in the sandbox shows every granted server, and
//     connected (it used to say "No MCP servers configured");
//   - a soda-mcpd started by hand, without NAME.conf (the README's "make
//     run"), can be granted and shown by "sodactl mcp status".
//
// No API key is needed: "mcp list" and the not-logged-in answer to a
// prompt are all local.
func TestClaudeCode(t *testing.T) {
	e := requireEnv(t)
	claude := e.claudeCLI(t)
	ccDir := filepath.Dir(filepath.Dir(filepath.Dir(claude)))
	if r := e.exec(execOpts{}, claude, "--version"); r.err != nil || !strings.Contains(r.stdout, "Claude Code") {
		t.Fatalf("control: the CLI does not run in the box: %s", r)
	}

	// A soda-mcpd started by hand, as "make run" does: no configuration,
	// its own token file, a fixed port.
	everything := filepath.Join(e.repo, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	start := fmt.Sprintf("systemd-run --quiet --unit soda-test-byhand %s/soda-mcpd --name byhand --listen 127.0.0.1:%d --token-file %s/byhand.token -- node %s stdio && "+
		"for i in $(seq 100); do [ -s /run/soda/mcp/byhand.status.json ] && break; sleep 0.1; done; cat /run/soda/mcp/byhand.status.json",
		e.bin, byHandPort, e.bin, everything)
	if r := e.exec(execOpts{}, "sh", "-c", start); r.err != nil || !strings.Contains(r.stdout, fmt.Sprintf(`"listen":["127.0.0.1:%d"]`, byHandPort)) {
		t.Fatalf("start soda-mcpd by hand: %s", r)
	}
	t.Cleanup(func() { e.exec(execOpts{}, "systemctl", "stop", "soda-test-byhand") })

	t.Run("mcp status by hand", func(t *testing.T) {
		r := e.exec(execOpts{}, filepath.Join(e.bin, "sodactl"), "mcp", "status", "byhand")
		if r.err != nil {
			t.Fatalf("sodactl mcp status byhand: %s", r)
		}
		for _, want := range []string{"config:   none (started by hand; /run/soda/mcp/byhand.status.json)",
			fmt.Sprintf("url:      http://127.0.0.1:%d/mcp", byHandPort), "token:    " + e.bin + "/byhand.token", "service:  foreground pid"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status lacks %q:\n%s", want, r)
			}
		}
	})

	for _, tc := range []struct {
		name, user string
		grants     []string // --mcp
		extra      []string
	}{
		{name: "root", grants: []string{"everything", "byhand"}},
		// The user, in group soda, grants the configured server, whose
		// token is 0640 root:soda (byhand's token is root's alone);
		// without a cgroup delegation the limits are waived.
		{name: testUser, user: testUser, grants: []string{"everything"}, extra: []string{"--allow-degraded", "cgroup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := append([]string{"--mcp", strings.Join(tc.grants, ","), "--ro", ccDir}, tc.extra...)
			// Positional arguments after the inserted --mcp-config=FILE:
			// "mcp list" must run the subcommand, not be read as files.
			r := e.sodactl(execOpts{user: tc.user}, append(base, "--", claude, "mcp", "list")...)
			if r.err != nil {
				t.Fatalf("claude mcp list in the sandbox: %s", r)
			}
			ports := map[string]int{"everything": mcpPort, "byhand": byHandPort}
			for _, g := range tc.grants {
				want := fmt.Sprintf("%s: http://127.0.0.1:%d/mcp (HTTP) - ✔ Connected", g, ports[g])
				if !strings.Contains(r.stdout, want) {
					t.Errorf("claude mcp list lacks %q: %s", want, r)
				}
			}
			if strings.Contains(r.stdout+r.stderr, "No MCP servers configured") || strings.Contains(r.stdout+r.stderr, "took \"mcp\"") {
				t.Errorf("claude mcp list did not see the grants: %s", r)
			}

			// A prompt as the first argument reaches Claude Code as a
			// prompt: without a login it answers so, instead of failing on
			// "MCP config file not found: .../fix the bug".
			r = e.sodactl(execOpts{user: tc.user}, append(base, "--", claude, "fix the bug")...)
			out := r.stdout + r.stderr
			if strings.Contains(out, "MCP config file not found") || strings.Contains(out, "Invalid MCP configuration") || !strings.Contains(out, "Not logged in") {
				t.Errorf("claude 'fix the bug' in the sandbox: want the not-logged-in answer to a prompt: %s", r)
			}
			e.noLeftovers(t)
		})
	}
}

// TestClaudeCodeThroughSodad: the "done means", with the real
// agent CLI: an ordinary user runs `sodactl run --profile P --mcp
// everything -- claude mcp list` on a host where sodad is installed (its
// unit, bus activation, bus policy, polkit actions and example rules, a
// profile that grants the configured server). The sandbox is sodad's (the
// mode is logged), the MCP server is granted from the profile, and Claude
// Code inside reaches it.
func TestClaudeCodeThroughSodad(t *testing.T) {
	e := requireEnv(t)
	claude := e.claudeCLI(t)
	ccDir := filepath.Dir(filepath.Dir(filepath.Dir(claude)))
	install := strings.Join([]string{
		"set -e",
		fmt.Sprintf("R=%s", e.repo),
		"install -m 0644 $R/units/sodad.service $R/units/soda.slice /etc/systemd/system/",
		"mkdir -p /etc/systemd/system/sodad.service.d",
		fmt.Sprintf("printf '[Service]\\nExecStart=\\nExecStart=%s/sodad --init %s/soda-sandbox-init --idle-exit 5m\\n' > /etc/systemd/system/sodad.service.d/test.conf", e.bin, e.bin),
		"install -m 0644 $R/polkit/io.github.soda_project.soda1.policy /usr/share/polkit-1/actions/",
		"install -m 0644 $R/packaging/dbus/io.github.soda_project.Soda1.conf /usr/share/dbus-1/system.d/",
		"install -D -m 0644 $R/packaging/dbus/io.github.soda_project.Soda1.service /usr/share/dbus-1/system-services/io.github.soda_project.Soda1.service",
		"install -D -m 0644 $R/polkit/50-soda-example.rules /etc/polkit-1/rules.d/50-soda.rules",
		"systemctl daemon-reload",
		"busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig",
		"systemctl restart polkit.service",
		"groupadd -f soda-users",
		"usermod -a -G soda-users " + testUser,
		"mkdir -p /etc/soda/mcp /etc/soda/sandbox",
		fmt.Sprintf("cp %s/mcp/everything.conf /etc/soda/mcp/", e.bin),
		fmt.Sprintf("printf '[Profile]\\nDescription=agents with everything\\nUsers=%s\\n[Grants]\\nMCP=everything\\n[Paths]\\nReadOnlyPaths=%s\\n' > /etc/soda/sandbox/agents.conf", testUser, ccDir),
	}, "\n")
	if r := e.exec(execOpts{}, "sh", "-c", install); r.err != nil {
		t.Fatalf("install sodad in the box: %s", r)
	}
	t.Cleanup(func() {
		e.exec(execOpts{}, "sh", "-c", "systemctl stop sodad.service; rm -rf /etc/soda/sandbox /etc/soda/mcp /etc/systemd/system/sodad.service /etc/systemd/system/sodad.service.d /usr/share/dbus-1/system-services/io.github.soda_project.Soda1.service; systemctl daemon-reload")
	})
	sodactl := filepath.Join(e.bin, "sodactl")
	r := e.exec(execOpts{user: testUser}, "sh", "-c", "cd / && "+sodactl+" run -v --profile agents --mcp everything --ro "+ccDir+" -- "+claude+" mcp list </dev/null")
	if r.err != nil {
		t.Fatalf("claude mcp list through sodad: %s\nsodad: %s", r, e.exec(execOpts{}, "journalctl", "-u", "sodad", "--no-pager", "-n", "30").stdout)
	}
	want := fmt.Sprintf("everything: http://127.0.0.1:%d/mcp (HTTP) - ✔ Connected", mcpPort)
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stderr, "sandbox mode: sandbox via sodad") {
		t.Errorf("claude mcp list through sodad: want %q and the mode in the log: %s", want, r)
	}
	// The sandbox was sodad's: its unit and audit are there, and it is gone.
	if j := e.exec(execOpts{}, "sh", "-c", "journalctl -u sodad --no-pager -o cat | grep -c 'sandbox'").stdout; strings.TrimSpace(j) == "0" {
		t.Errorf("sodad's journal has no sandbox lines")
	}
	e.noLeftovers(t)
}
