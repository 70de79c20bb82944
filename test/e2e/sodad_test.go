package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/test/testkit"
)

// TestSodad drives sodad as installed on a host, in a systemd box: the unit,
// the bus activation file, the bus policy, the polkit actions, the example
// rules and a profile "dev" that lists alice and bob. An unprivileged user
// creates sandboxes through the bus (test/sodadcall passes its stdio as
// Unix fds) and gets their exit status; an identity claimed in the spec is
// refused; a request beyond the profile is refused until a rule allows it;
// bob can neither see nor kill alice's sandbox, root can; systemctl
// restart and kill -9 of sodad hand the live sandboxes to the successor,
// which adopts them (egress served, clients following), and systemctl stop
// ends them, leaving nothing. It measures create→exit through sodad
// against a direct sodactl run -- true, and polkit's check.
func TestSodad(t *testing.T) {
	if os.Getenv("SODA_E2E") != "1" {
		t.Skip("the sodad test runs with SODA_E2E=1 (make test-e2e): it boots a systemd box")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root and test/box/sdbox check: not running as root (uid %d)", os.Geteuid())
	}
	repo := repoRoot(t)
	sdbox := filepath.Join(repo, "test", "box", "sdbox")
	mode := "hybrid"
	if out, err := exec.Command(sdbox, "check", "--cgroup", mode).CombinedOutput(); err != nil {
		t.Logf("no --cgroup hybrid on this host, using v2:\n%s", out)
		mode = "v2"
	}
	if out, err := exec.Command(sdbox, "check", "--cgroup", mode).CombinedOutput(); err != nil {
		t.Skipf("needs test/box/sdbox check: %s", strings.TrimSpace(string(out)))
	}

	// ---- what goes into the box.
	art := t.TempDir()
	// Static, with the lean sodactl and sodactl-full, as the Makefile and
	// the packages build them.
	if err := testkit.Build(art, "cmd/sodad", "cmd/soda-sandbox-init", "cmd/sodactl"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sodadcall", "sessioncall", "sodadexec", "mcpecho", "fakeupstream"} {
		build := exec.Command("go", "build", "-o", filepath.Join(art, p), "./test/"+p)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build test/%s: %v\n%s", p, err, out)
		}
	}
	for _, f := range []string{"polkit/io.github.soda_project.soda1.policy", "polkit/50-soda-example.rules",
		"packaging/dbus/io.github.soda_project.Soda1.conf", "packaging/dbus/io.github.soda_project.Soda1.service", "units/sodad.service", "units/soda.slice"} {
		copyFile(t, filepath.Join(repo, f), filepath.Join(art, filepath.Base(f)))
	}
	if err := os.Chmod(art, 0o755); err != nil {
		t.Fatal(err)
	}

	b := bootBox(t, sdbox, "--cgroup", mode, "--bind-ro", art, "--timeout", "60")
	b.onFailJournal(t)

	// ---- install as the package does (nfpm.yaml), plus a profile and users.
	must(t, b.sh(fmt.Sprintf(`set -e
A=%[1]s
install -m 0755 $A/sodad /usr/bin/sodad
install -m 0755 $A/sodactl /usr/bin/sodactl
install -D -m 0755 $A/sodactl-full /usr/libexec/soda/sodactl-full
install -D -m 0755 $A/soda-sandbox-init /usr/libexec/soda/soda-sandbox-init
install -m 0644 $A/sodad.service $A/soda.slice /usr/lib/systemd/system/
install -m 0644 $A/io.github.soda_project.soda1.policy /usr/share/polkit-1/actions/
install -m 0644 $A/io.github.soda_project.Soda1.conf /usr/share/dbus-1/system.d/
install -D -m 0644 $A/io.github.soda_project.Soda1.service /usr/share/dbus-1/system-services/io.github.soda_project.Soda1.service
install -D -m 0644 $A/50-soda-example.rules /etc/polkit-1/rules.d/50-soda.rules
mkdir -p /etc/systemd/system/sodad.service.d
printf '[Service]\nWatchdogSec=3s\nExecStart=\nExecStart=/usr/bin/sodad --idle-exit 5m --verbose --linger 10m --metrics-textfile\n' > /etc/systemd/system/sodad.service.d/test.conf
mkdir -p /run/soda/metrics
systemctl daemon-reload
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
systemctl restart polkit.service
groupadd -r soda-users
useradd -M -U -G soda-users -s /bin/sh alice
useradd -M -U -G soda-users -s /bin/sh bob
mkdir -p /etc/soda/sandbox
printf '[Profile]\nDescription=e2e\nUsers=alice bob\n[Grants]\nAllow=example.com:443\nAllowPrivate=127.0.0.1:18999\n[Limits]\nMemoryMax=1G\nTasksMax=256\n' > /etc/soda/sandbox/dev.conf
printf '[Profile]\nDescription=with an MCP server\nUsers=alice\n[Grants]\nMCP=echo\n' > /etc/soda/sandbox/mcp.conf
mkdir -p /etc/soda/mcp
printf '[Server]\nExecStart=/bin/true\n[Bridge]\nListen=127.0.0.1:18101\nAuth=none\n' > /etc/soda/mcp/echo.conf
`, art)))
	if out := b.run("systemd-analyze", "security", "sodad.service", "--no-pager"); out.err == nil || out.stdout != "" {
		t.Logf("systemd-analyze security sodad.service (last line): %s", lastLine(out.stdout))
	}

	as := func(user string, args ...string) result {
		if user == "" {
			return b.exec(runOpts{timeout: 90 * time.Second}, args...)
		}
		return b.exec(runOpts{timeout: 90 * time.Second}, append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"}, args...)...)
	}
	call := filepath.Join(art, "sodadcall")

	// 1. An unprivileged user, no session: bus activation starts sodad; the
	// exit status comes back; stdout is the caller's.
	r := as("alice", call, "--", "true")
	if r.err != nil {
		t.Fatalf("alice: sodadcall -- true:\n%s\nsodad: %s", r, b.run("systemctl", "status", "sodad", "--no-pager").stdout)
	}
	if st := strings.TrimSpace(b.run("systemctl", "is-active", "sodad").stdout); st != "active" {
		t.Errorf("sodad after the first call: %s, want active (bus activation)", st)
	}
	if r := as("alice", call, "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("alice: sh -c 'exit 3': exit %d, want 3\n%s", r.code, r)
	}
	if r := as("alice", call, "--", "sh", "-c", "echo hello-from-sandbox; id -u"); r.err != nil || !strings.Contains(r.stdout, "hello-from-sandbox") {
		t.Errorf("alice: the command's stdout did not reach the caller's:\n%s", r)
	}

	// The watchdog (3 s in this test) is fed: no restart after 5 s.
	time.Sleep(5 * time.Second)
	if n := strings.TrimSpace(b.run("systemctl", "show", "-P", "NRestarts", "sodad").stdout); n != "0" {
		t.Errorf("sodad restarted %s times with WatchdogSec=3s: the watchdog is not fed\n%s", n, b.run("journalctl", "-u", "sodad", "--no-pager", "-n", "20").stdout)
	}

	// A terminal: the slave of a pty passed as tty is the command's
	// controlling terminal.
	if r := as("alice", call, "-tty", "--", "sh", "-c", "test -t 0 && test -t 1 && echo on-a-terminal"); r.err != nil || !strings.Contains(r.stdout, "on-a-terminal") {
		t.Errorf("alice: -tty: the command is not on a terminal:\n%s", r)
	}

	// The installed sodactl runs through this sodad: run (the profile
	// chosen, the mode in the log, the exit status back), and the
	// sandbox commands on a live sandbox.
	{
		sc := "/usr/bin/sodactl"
		if r := as("alice", "sh", "-c", "cd / && "+sc+" run -v --profile dev -- sh -c 'echo via-sodactl; exit 3' </dev/null"); r.code != 3 || !strings.Contains(r.stdout, "via-sodactl") || !strings.Contains(r.stderr, "sandbox via sodad") {
			t.Errorf("sodactl run --profile dev: exit %d, want 3, its output and the mode in the log\n%s", r.code, r)
		} else {
			t.Logf("sodactl run --profile dev through sodad: exit 3, output passed, mode logged")
		}
		// SIGTERM to sodactl: forwarded, and SIGKILL after the grace
		// period (before, a command that ignores SIGTERM kept sodactl
		// and its sandbox running).
		r := as("alice", "bash", "-c", testkit.SigtermScript("cd /; "+sc+` run --profile dev -- sh -c "trap '' TERM; sleep 100"`, `pgrep -f '^sleep 100$' >/dev/null`))
		if rc, ms, alive, err := testkit.ParseSigterm(r.stdout); err != nil || alive {
			t.Errorf("sodactl run --profile dev still ran 30 s after its SIGTERM, its command ignoring it (%v):\n%s", err, r)
		} else if rc != 128+9 || ms < 4000 {
			t.Errorf("sodactl run --profile dev, SIGTERM ignored by its command: exit %d after %d ms, want %d after the 5 s grace period\n%s", rc, ms, 128+9, r)
		} else {
			t.Logf("sodactl run --profile dev, SIGTERM ignored by its command: SIGKILL %d ms after it, exit %d", ms, rc)
		}
		r = as("alice", call, "-no-wait", "-no-stdio", "--", "sleep", "303")
		if r.err != nil {
			t.Fatalf("alice: sleep 303:\n%s", r)
		}
		sid := strings.TrimSpace(r.stdout)
		for _, args := range [][]string{{"profiles"}, {"list"}, {"status", sid}, {"grant", "--private", sid, "127.0.0.1:18999"},
			{"revoke", sid, "example.com:443"}, {"audit", sid}, {"kill", "--signal", "KILL", sid}} {
			r := as("alice", append([]string{sc, "sandbox"}, args...)...)
			if r.err != nil {
				t.Errorf("sodactl sandbox %s:\n%s", strings.Join(args, " "), r)
			} else {
				t.Logf("sodactl sandbox %s: ok, %d bytes", strings.Join(args, " "), len(r.stdout))
			}
		}
	}

	// A profile's MCP server is granted at creation: its port relayed, the
	// agents' configuration in the sandbox's home names it.
	if r := as("alice", call, "-profile", "mcp", "--", "sh", "-c", `grep -rlq 127.0.0.1:18101 "$HOME" && echo mcp-configured`); r.err != nil || !strings.Contains(r.stdout, "mcp-configured") {
		t.Errorf("alice: profile mcp: the agents' configuration lacks the server:\n%s", r)
	}

	perRunMCP(t, b, as, art)
	profileKeys(t, b, as, art)
	profileImage(t, b, as, art)
	sodadMetrics(t, b, as)

	// 2. Identity claims in arguments are refused.
	if r := as("alice", call, "-claim-owner", "0", "--", "true"); r.err == nil || !strings.Contains(r.stderr, "InvalidArgs") {
		t.Errorf("an owner claimed in spec: want InvalidArgs\n%s", r)
	}
	// Bad input names what is wrong.
	if r := as("alice", call, "-profile", "nope", "--", "true"); r.err == nil || !strings.Contains(r.stderr, "NoSuchProfile") {
		t.Errorf("unknown profile: want NoSuchProfile\n%s", r)
	}
	if r := as("alice", call, "-allow", "no-port", "--", "true"); r.err == nil || !strings.Contains(r.stderr, "InvalidTarget") {
		t.Errorf("invalid target: want InvalidTarget\n%s", r)
	}

	if r := as("alice", "sh", "-c", call+" -stdout-fd 0 -- true </etc/hostname"); r.err == nil || !strings.Contains(r.stderr, "InvalidFd") || !strings.Contains(r.stderr, "fd stdout") {
		t.Errorf("a read-only fd as stdout: want InvalidFd naming stdout\n%s", r)
	}

	// 3. Beyond the profile: refused without a rule, allowed with one.
	r = as("alice", call, "-memory", strconv.Itoa(2<<30), "--", "true")
	if r.err == nil || !(strings.Contains(r.stderr, "InteractiveAuthorizationRequired") || strings.Contains(r.stderr, "ExceedsProfile")) {
		t.Errorf("MemoryMax 2G beyond the profile's 1G: want refused\n%s", r)
	}
	b.write(t, "/etc/polkit-1/rules.d/40-test.rules", `polkit.addRule(function(action, subject) {
    if (action.id == "io.github.soda_project.soda1.beyond-profile" && subject.user == "alice" && action.lookup("profile") == "dev")
        return polkit.Result.YES;
});
`, "0644")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = as("alice", call, "-memory", strconv.Itoa(2<<30), "--", "true")
		if r.err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if r.err != nil {
		t.Errorf("beyond the profile with a rule allowing it: still refused\n%s", r)
	}

	// 4. Another user's sandbox: bob can neither see nor kill it; root can.
	r = as("alice", call, "-no-wait", "-no-stdio", "--", "sleep", "300")
	if r.err != nil {
		t.Fatalf("alice: sleep 300:\n%s", r)
	}
	id := strings.TrimSpace(r.stdout)
	const dest, mgr = "io.github.soda_project.Soda1", "/io/github/soda_project/Soda1"
	if r := as("bob", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "GetSandbox", "s", id); r.err == nil || !strings.Contains(r.stderr, "no sandbox") {
		t.Errorf("bob GetSandbox of alice's: want NoSuchSandbox\n%s", r)
	}
	path := strings.Trim(strings.TrimPrefix(strings.TrimSpace(must(t, as("alice", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "GetSandbox", "s", id))), "o "), `"`)
	if r := as("bob", "busctl", "call", dest, path, "io.github.soda_project.Soda1.Sandbox", "Kill", "ia{sv}", "9", "0"); r.err == nil {
		t.Errorf("bob killed alice's sandbox\n%s", r)
	}
	if r := as("bob", "busctl", "get-property", dest, path, "io.github.soda_project.Soda1.Sandbox", "OwnerUID"); r.err == nil {
		t.Errorf("bob read alice's sandbox's properties\n%s", r)
	}
	if out := must(t, as("alice", "busctl", "get-property", dest, path, "io.github.soda_project.Soda1.Sandbox", "State", "Unit")); !strings.Contains(out, `"running"`) {
		t.Errorf("alice's sandbox State/Unit: %s", out)
	}
	if out := must(t, as("", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "ListSandboxes")); !strings.Contains(out, id) {
		t.Errorf("root's ListSandboxes lacks %s: %s", id, out)
	}
	if out := must(t, as("bob", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "ListSandboxes")); strings.Contains(out, id) {
		t.Errorf("bob's ListSandboxes shows alice's %s: %s", id, out)
	}
	// Grants at run time: the owner revokes without polkit, grants back
	// within the profile (grant, allowed by the example rules), beyond it
	// (beyond-profile, allowed by the rule above); bob may not; all in the
	// journal under SODA_SANDBOX.
	sbx := "io.github.soda_project.Soda1.Sandbox"
	allow := func() string {
		return must(t, as("alice", "busctl", "get-property", dest, path, sbx, "Allow"))
	}
	must(t, as("alice", "busctl", "call", dest, path, sbx, "Revoke", "sa{sv}", "example.com:443", "0"))
	if a := allow(); strings.Contains(a, "example.com") {
		t.Errorf("Allow after Revoke: %s", a)
	}
	must(t, as("alice", "busctl", "call", dest, path, sbx, "Grant", "sa{sv}", "example.com:443", "0"))
	// Granting it again changes nothing and succeeds.
	must(t, as("alice", "busctl", "call", dest, path, sbx, "Grant", "sa{sv}", "example.com:443", "0"))
	must(t, as("alice", "busctl", "call", dest, path, sbx, "Grant", "sa{sv}", "api.github.com:443", "0"))
	if a := allow(); !strings.Contains(a, "example.com:443") || !strings.Contains(a, "api.github.com:443") {
		t.Errorf("Allow after two Grants: %s", a)
	}
	// bob, whom no rule lets go beyond the profile, is refused a grant
	// beyond it on his own sandbox, and not one within it.
	r = as("bob", call, "-no-wait", "-no-stdio", "-allow-none", "--", "sleep", "304")
	if r.err != nil {
		t.Fatalf("bob: sleep 304:\n%s", r)
	}
	bobPath := strings.Trim(strings.TrimPrefix(strings.TrimSpace(must(t, as("bob", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "GetSandbox", "s", strings.TrimSpace(r.stdout)))), "o "), `"`)
	if r := as("bob", "busctl", "call", dest, bobPath, sbx, "Grant", "sa{sv}", "api.github.com:443", "0"); r.err == nil ||
		!(strings.Contains(r.stderr, "interactive") || strings.Contains(r.stderr, "exceeds")) {
		t.Errorf("bob: Grant beyond the profile without a rule: want refused\n%s", r)
	}
	must(t, as("bob", "busctl", "call", dest, bobPath, sbx, "Grant", "sa{sv}", "example.com:443", "0"))
	must(t, as("bob", "busctl", "call", dest, bobPath, sbx, "Kill", "ia{sv}", "9", "0"))
	if r := as("bob", "busctl", "call", dest, path, sbx, "Grant", "sa{sv}", "pypi.org:443", "0"); r.err == nil {
		t.Errorf("bob granted on alice's sandbox\n%s", r)
	}
	if r := as("alice", "busctl", "call", dest, path, sbx, "Grant", "sa{sv}", "not a target", "0"); r.err == nil || !strings.Contains(r.stderr, "not a target") {
		t.Errorf("invalid Grant target: want InvalidTarget naming it\n%s", r)
	}
	if j := b.run("journalctl", "--no-pager", "-o", "cat", "SODA_SANDBOX="+id).stdout; !strings.Contains(j, "sandbox grant") || !strings.Contains(j, "sandbox revoke") {
		t.Errorf("journal of %s lacks the grant and revoke:\n%s", id, j)
	}
	must(t, as("", "busctl", "call", dest, path, "io.github.soda_project.Soda1.Sandbox", "Kill", "ia{sv}", "9", "0"))
	waitFor(t, 15*time.Second, "alice's sandbox killed by root", func() bool {
		out := as("alice", "busctl", "get-property", dest, path, "io.github.soda_project.Soda1.Sandbox", "State", "ExitStatus").stdout
		return strings.Contains(out, `"exited"`) && strings.Contains(out, "i 137")
	})
	if out := must(t, as("alice", "busctl", "call", dest, path, "io.github.soda_project.Soda1.Sandbox", "ReadAudit", "tua{sv}", "0", "100", "0")); !strings.Contains(out, `\"event\":\"start\"`) && !strings.Contains(out, `"event":"start"`) {
		t.Errorf("ReadAudit lacks the start record: %.400s", out)
	}
	intro := must(t, as("alice", "busctl", "introspect", dest, mgr))
	for _, m := range []string{".CreateSandbox", ".GetSandbox", ".ListSandboxes", ".ListProfiles", ".SandboxNew", ".SandboxExited", ".SandboxRemoved", ".Draining", ".Version"} {
		if !strings.Contains(intro, m) {
			t.Errorf("busctl introspect of the Manager lacks %s:\n%s", m, intro)
		}
	}
	if out := must(t, as("alice", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "ListProfiles")); !strings.Contains(out, `"dev"`) {
		t.Errorf("ListProfiles for alice: %s", out)
	}

	// The agent inside sees a grant added at run time and loses it when
	// revoked (new connections), through sodad's proxy: a web server on the
	// box's loopback (the box has its own network namespace), reached with
	// CONNECT (curl -p) through the sandbox's proxy.
	must(t, b.run("systemd-run", "--unit=e2e-web", "python3", "-m", "http.server", "18999", "--bind", "127.0.0.1", "--directory", "/etc"))
	waitFor(t, 10*time.Second, "the web server", func() bool {
		return b.run("curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:18999/hostname").err == nil
	})
	probe := `i=0; while [ $i -lt 150 ]; do if env -u NO_PROXY -u no_proxy curl -s -o /dev/null -m 2 -p http://127.0.0.1:18999/hostname; then echo ok; else echo fail; fi; i=$((i+1)); sleep 0.1; done`
	web := b.start(t, nil, "setpriv", "--reuid=alice", "--regid=alice", "--init-groups", call, "-allow-none", "--", "sh", "-c", probe)
	var webID string
	waitFor(t, 15*time.Second, "the probe sandbox's id", func() bool {
		if m := regexp.MustCompile(`created id=(\S+)`).FindStringSubmatch(web.stderr.String()); m != nil {
			webID = m[1]
		}
		return webID != ""
	})
	webPath := strings.Trim(strings.TrimPrefix(strings.TrimSpace(must(t, as("alice", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "GetSandbox", "s", webID))), "o "), `"`)
	until := func(want string) {
		t.Helper()
		for i := 0; i < 60; i++ {
			if l := web.next(t, 10*time.Second, "probe"); l == want {
				return
			}
		}
		t.Fatalf("the probe never printed %q", want)
	}
	until("fail")
	must(t, as("alice", "busctl", "call", dest, webPath, "io.github.soda_project.Soda1.Sandbox", "Grant", "sa{sv}", "127.0.0.1:18999", "1", "private", "b", "true"))
	until("ok")
	must(t, as("alice", "busctl", "call", dest, webPath, "io.github.soda_project.Soda1.Sandbox", "Revoke", "sa{sv}", "127.0.0.1:18999", "1", "private", "b", "true"))
	until("fail")
	must(t, as("alice", "busctl", "call", dest, webPath, "io.github.soda_project.Soda1.Sandbox", "Kill", "ia{sv}", "15", "0"))
	web.finish(t, 15*time.Second)
	if j := b.run("journalctl", "--no-pager", "-o", "cat", "SODA_SANDBOX="+webID).stdout; !strings.Contains(j, "sandbox grant") || !strings.Contains(j, "sandbox revoke") {
		t.Errorf("journal of %s lacks the grant and revoke:\n%s", webID, lastLines(j, 30))
	}

	// 5. Figures: create→exit through sodad against a direct sodactl run.
	var viaSodad, viaSodactl, direct, plain, plainAlice, created []time.Duration
	createRe := regexp.MustCompile(`create=(\S+) `)
	for range 25 {
		t0 := time.Now()
		r := as("alice", call, "--", "true")
		if r.err != nil {
			t.Fatalf("sodadcall -- true:\n%s", r)
		}
		viaSodad = append(viaSodad, time.Since(t0))
		if m := createRe.FindStringSubmatch(r.stderr); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				created = append(created, d)
			}
		}
		t0 = time.Now()
		if r := as("", "sh", "-c", "cd / && sodactl run --direct -- true </dev/null"); r.err != nil {
			t.Fatalf("sodactl run --direct -- true:\n%s", r)
		}
		direct = append(direct, time.Since(t0))
		t0 = time.Now()
		if r := as("alice", "sh", "-c", "cd / && sodactl run --profile dev -- true </dev/null"); r.err != nil {
			t.Fatalf("sodactl run --profile dev -- true:\n%s", r)
		}
		viaSodactl = append(viaSodactl, time.Since(t0))
		t0 = time.Now()
		if r := as("", "sh", "-c", "cd / && true </dev/null"); r.err != nil {
			t.Fatalf("plain true:\n%s", r)
		}
		plain = append(plain, time.Since(t0))
		// alice's runs go through setpriv --init-groups (group
		// lookups): her plain true takes that path too.
		t0 = time.Now()
		if r := as("alice", "sh", "-c", "cd / && true </dev/null"); r.err != nil {
			t.Fatalf("plain true as alice:\n%s", r)
		}
		plainAlice = append(plainAlice, time.Since(t0))
	}
	viaOver, directOver := median(viaSodactl)-median(plainAlice), median(direct)-median(plain)
	t.Logf("figures: overhead over a plain `true` by the same path (root %s, alice through setpriv %s): sodactl run --profile through sodad %s, direct %s: ratio %.2f (target <= 1.3)",
		median(plain), median(plainAlice), viaOver, directOver, float64(viaOver)/float64(directOver))
	t.Logf("figures: create→exit of `true` (median of %d, including the box's exec): through sodad with test/sodadcall %s, with sodactl run --profile %s; direct sodactl run --direct %s",
		len(direct), median(viaSodad), median(viaSodactl), median(direct))
	if len(created) > 0 {
		t.Logf("figures: connect + CreateSandbox returned (the command running), median %s", median(created))
	}
	t.Logf("figures: where sodad's CreateSandbox spends its time (median of the last %d, sodad --verbose): %s", 2*len(direct), sodadPhases(t, b, 2*len(direct)))

	// 100 create/exit cycles leave no record, home, unit or fd of sodad's.
	sodadFds := func() int {
		pid := strings.TrimSpace(b.run("systemctl", "show", "-P", "MainPID", "sodad").stdout)
		n, _ := strconv.Atoi(strings.TrimSpace(b.run("sh", "-c", "ls /proc/"+pid+"/fd | wc -l").stdout))
		return n
	}
	before := sodadFds()
	must(t, as("alice", "sh", "-c", "i=0; while [ $i -lt 100 ]; do "+call+" -no-stdio -- true || exit 1; i=$((i+1)); done"))
	time.Sleep(500 * time.Millisecond)
	if after := sodadFds(); after > before+2 {
		t.Errorf("sodad's open fds: %d before 100 sandboxes, %d after (a leak)", before, after)
	}
	for what, cmd := range map[string]string{
		"state records":          "ls -A /var/lib/soda/sodad/sandboxes",
		"homes":                  "ls -A /var/lib/soda/sodad/homes | grep -v '\\.lock$' || true",
		"sandbox units":          "systemctl list-units --no-legend 'soda-sandbox-*' | grep -v inactive || true",
		"sandbox init processes": "pgrep -a -f '^[^ ]*soda-sandbox-init' || true",
	} {
		if out := strings.TrimSpace(b.run("sh", "-c", cmd).stdout); out != "" {
			t.Errorf("%s left after 100 cycles:\n%s", what, out)
		}
	}
	t.Logf("sodad's open fds: %d before 100 create/exit cycles, %d after", before, sodadFds())

	// 6. Restarts. systemctl restart and kill -9 of sodad hand the live
	// sandboxes to the successor, which adopts them: an agent probing a
	// target granted at run time keeps getting through after each (the
	// successor serves its egress, with the grant), and its client, the
	// installed sodactl run, follows the successor to the exit status; 5
	// idle sandboxes keep running, with their records and units. Then
	// systemctl stop ends them all, and nothing is left: no unit, process,
	// record or stored descriptor.
	b.write(t, "/usr/local/bin/e2e-probe", "#!/bin/sh\n"+
		"i=0; while [ $i -lt 1200 ]; do if env -u NO_PROXY -u no_proxy curl -s -o /dev/null -m 2 -p http://127.0.0.1:18999/hostname; then echo ok; else echo fail; fi; i=$((i+1)); sleep 0.1; done\n", "0755")
	agent := b.start(t, nil, "setpriv", "--reuid=alice", "--regid=alice", "--init-groups", "sh", "-c",
		"cd / && exec sodactl run -v --profile dev -- /usr/local/bin/e2e-probe </dev/null")
	untilLine := func(p *bg, want string) {
		t.Helper()
		for i := 0; i < 100; i++ {
			if l := p.next(t, 15*time.Second, "probe"); l == want {
				return
			}
		}
		t.Fatalf("the probe never printed %q", want)
	}
	var agentID string
	waitFor(t, 15*time.Second, "the agent's sandbox id in sodactl's log", func() bool {
		if m := regexp.MustCompile(`sandbox via sodad.* sandbox=(\S+)`).FindStringSubmatch(agent.stderr.String()); m != nil {
			agentID = m[1]
		}
		return agentID != ""
	})
	// The profile grants the target at start: revoked, then granted at
	// run time, so that the successor must have the live allow-list.
	untilLine(agent, "ok")
	must(t, as("alice", "sodactl", "sandbox", "revoke", agentID, "127.0.0.1:18999"))
	untilLine(agent, "fail")
	must(t, as("alice", "sodactl", "sandbox", "grant", "--private", agentID, "127.0.0.1:18999"))
	untilLine(agent, "ok")
	var ids []string
	for i := 0; i < 5; i++ {
		r := as("alice", call, "-no-wait", "-no-stdio", "--", "sleep", "301")
		if r.err != nil {
			t.Fatalf("alice: sleep 301:\n%s", r)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	stored := func() string {
		return strings.TrimSpace(b.run("systemctl", "show", "-P", "NFileDescriptorStore", "sodad").stdout)
	}
	t.Logf("descriptors in sodad's fd store with 6 live sandboxes: %s", stored())
	survived := func(how string) {
		t.Helper()
		if n := strings.Count(b.run("pgrep", "-f", "^sleep 301").stdout, "\n"); n != 5 {
			t.Errorf("after %s: %d of the 5 idle sandboxes run", how, n)
		}
		recs := b.run("ls", "/var/lib/soda/sodad/sandboxes").stdout
		for _, id := range append([]string{agentID}, ids...) {
			if !strings.Contains(recs, id+".json") {
				t.Errorf("after %s: no state record for %s: %s", how, id, recs)
			}
		}
		// The successor serves the agent's egress, its grant kept: an
		// "ok" printed a second after the predecessor was gone.
		for end := time.After(time.Second); ; {
			select {
			case <-agent.lines:
				continue
			case <-end:
			}
			break
		}
		untilLine(agent, "ok")
		if out := must(t, as("alice", "sodactl", "sandbox", "status", ids[0])); !strings.Contains(out, "running") {
			t.Errorf("after %s: sodactl sandbox status %s:\n%s", how, ids[0], out)
		}
	}
	must(t, b.exec(runOpts{timeout: 60 * time.Second}, "systemctl", "restart", "sodad"))
	survived("systemctl restart sodad")
	jl := b.run("journalctl", "--no-pager", "-o", "cat", "-u", "sodad").stdout
	if n := strings.Count(jl, "sandbox handed over"); n < 6 {
		t.Errorf("journal: %d 'sandbox handed over' after systemctl restart, want 6:\n%s", n, lastLines(jl, 30))
	}
	if n := strings.Count(jl, "sandbox adopted"); n < 6 {
		t.Errorf("journal: %d 'sandbox adopted' after systemctl restart, want 6:\n%s", n, lastLines(jl, 30))
	}

	pid := strings.TrimSpace(must(t, b.run("systemctl", "show", "-P", "MainPID", "sodad")))
	must(t, b.run("kill", "-9", pid))
	waitFor(t, 20*time.Second, "sodad restarted after kill -9", func() bool {
		p := strings.TrimSpace(b.run("systemctl", "show", "-P", "MainPID", "sodad").stdout)
		return p != pid && p != "0" && strings.TrimSpace(b.run("systemctl", "is-active", "sodad").stdout) == "active"
	})
	survived("kill -9 of sodad")
	for _, id := range ids {
		if j := b.run("journalctl", "--no-pager", "-o", "cat", "SODA_SANDBOX="+id).stdout; strings.Count(j, "sandbox adopted") < 2 {
			t.Errorf("journal of %s: want adopted twice (restart, kill -9):\n%s", id, lastLines(j, 20))
		}
	}

	// The agent's client followed both successors: the exit status of a
	// kill reaches it.
	must(t, as("alice", "sodactl", "sandbox", "kill", agentID))
	agent.finish(t, 20*time.Second)
	if code := agent.cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("sodactl run across two sodad restarts: exit %d, want 143 (killed by SIGTERM)\n%s", code, lastLines(agent.stderr.String(), 20))
	}

	// systemctl stop ends them: nothing left.
	must(t, b.exec(runOpts{timeout: 60 * time.Second}, "systemctl", "stop", "sodad"))
	waitFor(t, 20*time.Second, "no sandbox process after systemctl stop sodad", func() bool {
		return b.run("pgrep", "-f", "^sleep 301").code == 1
	})
	if out := strings.TrimSpace(b.run("ls", "/var/lib/soda/sodad/sandboxes").stdout); out != "" {
		t.Errorf("records left after systemctl stop sodad: %s", out)
	}
	if j := b.run("journalctl", "--no-pager", "-o", "cat", "-u", "sodad").stdout; strings.Count(j, "sandbox ended: sodad stopping") < 5 {
		t.Errorf("journal lacks 'sandbox ended: sodad stopping' 5 times:\n%s", lastLines(j, 20))
	}
	if out := b.run("sh", "-c", "systemctl list-units --no-legend --all 'soda-sandbox-*' | grep -v inactive || true").stdout; strings.TrimSpace(out) != "" {
		t.Errorf("sandbox units left after systemctl stop sodad:\n%s", out)
	}
	if n := stored(); n != "0" {
		t.Errorf("descriptors left in sodad's fd store after stop: %s", n)
	}
	if out := strings.TrimSpace(b.run("sh", "-c", "pgrep -a -f '^[^ ]*soda-sandbox-init' || true").stdout); out != "" {
		t.Errorf("sandbox init processes left after systemctl stop sodad:\n%s", out)
	}

	// 7. Persistent sessions through sodad: sodactl sandbox mcp --profile
	// dev as alice, driven by the go-sdk client (test/sessioncall) through
	// a whole session. Each sandbox is sodad's, owned by alice, run as a
	// dedicated uid, with its workspace; its journal has the session's
	// records and sodad's; nothing is left after close.
	sess := as("alice", "sh", "-c", "cd / && "+filepath.Join(art, "sessioncall")+" -egress http://127.0.0.1:18999/hostname -limits -- sodactl sandbox mcp --profile dev")
	if sess.err != nil || !strings.Contains(sess.stdout, "ok close") || !strings.Contains(sess.stdout, "ok egress 127.0.0.1:18999 allow") || !strings.Contains(sess.stdout, "ok limits") {
		t.Fatalf("a session through sodad:\n%s", sess)
	}
	t.Logf("a session through sodad: %s", strings.ReplaceAll(strings.TrimSpace(sess.stdout), "\n", "; "))
	sid := regexp.MustCompile(`journal SODA_SANDBOX=(\S+)`).FindStringSubmatch(sess.stdout)
	if sid == nil {
		t.Fatalf("no sandbox id in the audit step:\n%s", sess.stdout)
	}
	if m := regexp.MustCompile(`ok uid (\d+) /workspace`).FindStringSubmatch(sess.stdout); m == nil || m[1] == strings.TrimSpace(b.run("id", "-u", "alice").stdout) {
		t.Errorf("the session's commands ran as %v, want a dedicated uid in /workspace", m)
	}
	sj := b.run("journalctl", "--no-pager", "-o", "cat", "SODA_SANDBOX="+sid[1]).stdout
	for _, want := range []string{"sandbox create", "session exec", "session reset", "sandbox exited"} {
		if !strings.Contains(sj, want) {
			t.Errorf("journal of session sandbox %s lacks %q:\n%s", sid[1], want, lastLines(sj, 30))
		}
	}
	if out := b.run("sh", "-c", "systemctl list-units --no-legend 'soda-sandbox-*' | grep -v inactive; ls -A /var/lib/soda/sodad/sandboxes").stdout; strings.TrimSpace(out) != "" {
		t.Errorf("left after the session closed:\n%s", out)
	}
	// Exec with end_others through sodad (test/sodadexec): what a hostile
	// command leaves (background, setsid, double fork, nohup, SIGTERM
	// ignored, a fork loop) is dead when the call returns, the control
	// without it is not; workspace_full comes from the filesystem.
	if r := as("alice", "sh", "-c", "cd / && "+filepath.Join(art, "sodadexec")+" -profile dev"); r.err != nil || !strings.Contains(r.stdout, "ok all") {
		t.Errorf("Exec end_others and workspace_full through sodad:\n%s", r)
	} else {
		t.Logf("Exec end_others through sodad: %s", strings.ReplaceAll(strings.TrimSpace(r.stdout), "\n", "; "))
	}
	// Memory of an idle session: sodad's share and the sandbox's, with 8
	// sessions held open by one server (its spare counts as a ninth
	// sandbox only if there is room: 8 is the limit, so none).
	rss := func(pid string) int64 {
		v := strings.TrimSpace(b.run("sh", "-c", "awk '/^VmRSS:/ {print $2}' /proc/"+pid+"/status").stdout)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	sodadPID := strings.TrimSpace(b.run("systemctl", "show", "-P", "MainPID", "sodad").stdout)
	before8 := rss(sodadPID)
	held := b.start(t, nil, "setpriv", "--reuid=alice", "--regid=alice", "--init-groups", "sh", "-c", "cd / && "+filepath.Join(art, "sessioncall")+" -hold 8 -- sodactl sandbox mcp --profile dev")
	if l := held.next(t, 60*time.Second, "hold 8 sessions"); l != "ok held 8" {
		t.Fatalf("hold 8 sessions: %q\n%s", l, held.stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	var initKiB int64
	inits := strings.Fields(b.run("sh", "-c", "pgrep -f '^soda-sandbox-init' || true").stdout)
	for _, p := range inits {
		initKiB += rss(p)
	}
	sodadPer := float64(rss(sodadPID)-before8) / 8
	// Exec's bad input, on one of them: each a D-Bus error naming it; bob
	// may not Exec in alice's sandbox; a sandbox that is not persistent
	// says so.
	list := must(t, as("alice", "busctl", "call", "--json=short", dest, mgr, "io.github.soda_project.Soda1.Manager", "ListSandboxes"))
	// One of the held sessions: a running sandbox of profile dev (the
	// list keeps the ended ones too).
	var listed struct {
		Data [][][]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(list), &listed); err != nil || len(listed.Data) != 1 {
		t.Fatalf("ListSandboxes while 8 sessions are held: %v: %s", err, list)
	}
	var heldPath []string
	for _, e := range listed.Data[0] {
		if len(e) == 5 && e[2] == "dev" && e[3] == "running" {
			heldPath = []string{"", fmt.Sprint(e[4])}
		}
	}
	if heldPath == nil {
		t.Fatalf("ListSandboxes while 8 sessions are held: no running sandbox of profile dev: %s", list)
	}
	const sbi = "io.github.soda_project.Soda1.Sandbox"
	for _, c := range []struct {
		user string
		args []string
		want string
	}{
		{"alice", []string{"Exec", "asa{sv}a{sv}", "0", "0", "0"}, "argv is empty"},
		{"alice", []string{"Exec", "asa{sv}a{sv}", "1", "true", "1", "dir", "s", "workspace", "0"}, "clean absolute path"},
		{"alice", []string{"Exec", "asa{sv}a{sv}", "1", "true", "1", "timeout", "s", "5", "0"}, "want type t"},
		{"alice", []string{"Exec", "asa{sv}a{sv}", "1", "true", "1", "uid", "u", "0", "0"}, "unknown option"},
		{"alice", []string{"Exec", "asa{sv}a{sv}", "1", "true", "0", "1", "stdout", "s", "x"}, "want a variant of type h"},
		{"bob", []string{"Exec", "asa{sv}a{sv}", "1", "true", "0", "0"}, "exec-other"},
	} {
		r := as(c.user, append([]string{"busctl", "call", dest, heldPath[1], sbi}, c.args...)...)
		if r.err == nil || !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("%s: busctl call %v: want an error saying %q\n%s", c.user, c.args, c.want, r)
		}
	}
	// Policy per operation: a rule forbids alice's exec in her own
	// sandbox; she may still read its audit; without the rule she may
	// exec again.
	execTrue := []string{"busctl", "call", dest, heldPath[1], sbi, "Exec", "asa{sv}a{sv}", "1", "true", "0", "0"}
	if r := as("alice", execTrue...); r.err != nil {
		t.Errorf("alice's Exec in her own sandbox by default (the control):\n%s", r)
	}
	b.write(t, "/etc/polkit-1/rules.d/30-no-exec.rules", `polkit.addRule(function(action, subject) {
    if (action.id == "io.github.soda_project.soda1.exec" && subject.user == "alice")
        return polkit.Result.NO;
});
`, "0644")
	// execUntil retries alice's Exec until ok says its result is the one
	// wanted (polkitd reloads rules.d a moment after a change).
	execUntil := func(what string, ok func(result) bool) {
		t.Helper()
		var last result
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if last = as("alice", execTrue...); ok(last) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: not within 30 s; the last Exec:\n%s", what, last)
				return
			}
		}
	}
	// busctl prints the well-known AccessDenied as "Access denied", not
	// sodad's message.
	execUntil("a rule forbidding alice's exec in her own sandbox", func(r result) bool {
		return r.err != nil && strings.Contains(r.stderr, "Access denied")
	})
	if r := as("alice", "busctl", "call", dest, heldPath[1], sbi, "ReadAudit", "tua{sv}", "0", "10", "0"); r.err != nil {
		t.Errorf("alice's ReadAudit of her own sandbox while exec is forbidden:\n%s", r)
	}
	must(t, b.sh("rm /etc/polkit-1/rules.d/30-no-exec.rules"))
	execUntil("alice's exec allowed again once the rule is gone", func(r result) bool { return r.err == nil })
	t.Logf("figures: memory per idle session through sodad (8 held): sodad +%.0f KiB RSS each; the sandbox's init %.0f KiB RSS each (%d inits)",
		sodadPer, float64(initKiB)/float64(max(len(inits), 1)), len(inits))
	held.finish(t, 30*time.Second)

	// 8. Idle exit: with no sandbox and no call for the idle time, sodad
	// exits 0 (inactive, not failed); the next call activates it again.
	b.write(t, "/etc/systemd/system/sodad.service.d/test.conf", "[Service]\nExecStart=\nExecStart=/usr/bin/sodad --idle-exit 2s\n", "0644")
	must(t, b.sh("systemctl daemon-reload && systemctl restart sodad"))
	waitFor(t, 20*time.Second, "sodad idle exit", func() bool {
		return strings.TrimSpace(b.run("systemctl", "is-active", "sodad").stdout) == "inactive"
	})
	if out := must(t, as("alice", "busctl", "call", dest, mgr, "io.github.soda_project.Soda1.Manager", "ListProfiles")); !strings.Contains(out, `"dev"`) {
		t.Errorf("ListProfiles after idle exit (bus activation): %s", out)
	}
	if st := strings.TrimSpace(b.run("systemctl", "is-active", "sodad").stdout); st != "active" {
		t.Errorf("sodad after a call following its idle exit: %s, want active", st)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

// perRunMCP runs sodactl run --mcp-config through sodad (issue 15, point
// 4): the agent's own server runs in the caller's sodactl, as the caller,
// never as root; the profile's PerRunMCP= decides whether it may be
// granted; the sandbox reaches it with the token sodad wrote into its
// home, sees the configuration file without its secret, and ends when
// sodactl is killed.
func perRunMCP(t *testing.T, b *box, as func(string, ...string) result, art string) {
	t.Helper()
	must(t, b.sh(fmt.Sprintf(`set -e
printf '[Profile]\nDescription=per-run MCP servers\nUsers=alice\n[Grants]\nPerRunMCP=yes\n[Paths]\nReadWritePaths=/srv/alice\n' > /etc/soda/sandbox/perrun.conf
printf '[Profile]\nDescription=no per-run MCP servers\nUsers=alice\n[Paths]\nReadWritePaths=/srv/alice\n' > /etc/soda/sandbox/plain.conf
# The box's root is an overlay, which cannot be idmapped; tmpfs can.
mkdir -p /srv/alice && mount -t tmpfs -o mode=0755 soda-e2e /srv/alice && mkdir -p /srv/alice/proj
cat > /srv/alice/proj/.mcp.json <<'JSON'
{"mcpServers": {"echo": {"command": "sh", "args": ["-c", "id -u > /srv/alice/proj/server-uid; exec %s/mcpecho"], "env": {"ECHO_KEY": "perrun-s3cret-value"}}}}
JSON
chown -R alice:alice /srv/alice
`, art)))
	sc := "cd /srv/alice/proj && /usr/bin/sodactl run -v --mcp-config .mcp.json --rw /srv/alice/proj "
	probe := `U=$(grep -o 'http://127.0.0.1:[0-9]*/mcp' "$SODA_MCP_CONFIG" | head -1); T=$(grep -o 'Bearer [0-9a-f]*' "$SODA_MCP_CONFIG" | head -1)
curl -s --noproxy '*' -H "Authorization: $T" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' "$U"; echo
cat .mcp.json; env | grep -c perrun-s3cre[t]; grep -rl perrun-s3cre[t] "$HOME" /srv/alice/proj /tmp /run 2>/dev/null; echo end`
	r := as("alice", "sh", "-c", sc+"--profile perrun -- sh -c '"+strings.ReplaceAll(probe, "'", `'\''`)+"' </dev/null")
	if r.err != nil || !strings.Contains(r.stderr, "sandbox via sodad") || !strings.Contains(r.stdout, "serverInfo") {
		t.Errorf("sodactl run --mcp-config --profile perrun: want the sandbox via sodad reaching the server:\n%s", r)
	}
	if strings.Contains(r.stdout, "perrun-s3cret") || !strings.Contains(r.stdout, "\n0\nend") {
		t.Errorf("the server's secret is visible in the sandbox:\n%s", r)
	}
	if !strings.Contains(r.stdout, `"type": "http"`) {
		t.Errorf("the sandbox does not see .mcp.json rewritten with an HTTP entry:\n%s", r)
	}
	uid := strings.TrimSpace(as("", "id", "-u", "alice").stdout)
	if got := strings.TrimSpace(b.run("cat", "/srv/alice/proj/server-uid").stdout); got != uid {
		t.Errorf("the per-run server ran as uid %q, want alice's %s", got, uid)
	}
	// A required server that fails its check by first use stops the run
	// through sodad too: exit 125, the server named, its stderr quoted,
	// the command (which would wait 60 s) killed.
	must(t, b.sh(`cat > /srv/alice/proj/broken.json <<'JSON'
{"mcpServers": {"broken": {"command": "sh", "args": ["-c", "echo 'broken: no database' >&2; exit 3"]}}}
JSON
chown alice:alice /srv/alice/proj/broken.json`))
	start := time.Now()
	r = as("alice", "sh", "-c", "cd /srv/alice/proj && /usr/bin/sodactl run --mcp-config broken.json --rw /srv/alice/proj --profile perrun -- sleep 60 </dev/null")
	if r.code != 125 || !strings.Contains(r.stderr, "MCP server broken failed its health check") || !strings.Contains(r.stderr, "broken: no database") {
		t.Errorf("a failing per-run server through sodad: want exit 125 naming it and quoting its stderr:\n%s", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the run through sodad took %s: the command was not stopped", d)
	}
	// A profile without PerRunMCP=yes refuses, naming the key.
	r = as("alice", "sh", "-c", sc+"--profile plain -- true </dev/null")
	if r.code != 125 || !strings.Contains(r.stderr, "PerRunMCP=yes") {
		t.Errorf("--mcp-config with a profile without PerRunMCP=yes: want exit 125 naming the key:\n%s", r)
	}
	// kill -9 of sodactl: the servers die with it, and sodad stops the
	// sandbox (its life fd reads EOF).
	r = as("alice", "sh", "-c", sc+"--profile perrun -- sleep 301 </dev/null >/dev/null 2>&1 & echo $! > /srv/alice/proj/sodactl.pid; "+
		"for i in $(seq 100); do pgrep -f 'sleep 30[1]' >/dev/null && break; sleep 0.1; done; pgrep -f 'sleep 30[1]'")
	if r.err != nil {
		t.Fatalf("start sodactl run -- sleep 301 through sodad:\n%s", r)
	}
	must(t, b.sh("kill -9 $(cat /srv/alice/proj/sodactl.pid)"))
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := b.sh("pgrep -af 'sleep 30[1]|mcpech[o]'; true").stdout
		if strings.TrimSpace(left) == "" {
			t.Logf("kill -9 of sodactl through sodad: its server and the sandbox are gone")
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("left after kill -9 of sodactl (per-run server or sandbox):\n%s", left)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// profileKeys: a profile's [Keys] (issue 25). alice's sandbox reaches a
// model API through sodad's gateway and a forge with a secret through the
// proxy's TLS termination; the upstreams (test/fakeupstream, on the box's
// loopback, their CAs in UpstreamCA=) get the real values, while alice
// reads them nowhere: not in the sandbox, not in the credential files,
// not on the bus (the Keys property names them), not in the journal.
func profileKeys(t *testing.T, b *box, as func(string, ...string) result, art string) {
	t.Helper()
	const llmKey, ghToken = "sk-ant-e2e-REAL-5c2f9a", "ghp-e2e-REAL-81d4b7"
	must(t, b.sh(fmt.Sprintf(`set -e
mkdir -p /etc/soda/credentials && chmod 0700 /etc/soda/credentials
printf '%%s\n' '%[2]s' > /etc/soda/credentials/anthropic
printf '%%s\n' '%[3]s' > /etc/soda/credentials/gh
chmod 0600 /etc/soda/credentials/anthropic /etc/soda/credentials/gh
mkdir -p /etc/soda/ca
systemd-run --quiet --unit soda-test-fake-llm %[1]s/fakeupstream --listen 127.0.0.1:18997 --ca-out /etc/soda/ca/llm.pem --log /run/fake-llm.log --key-file /etc/soda/credentials/anthropic
systemd-run --quiet --unit soda-test-fake-gh %[1]s/fakeupstream --listen 127.0.0.1:18996 --ca-out /etc/soda/ca/gh.pem --log /run/fake-gh.log
for i in $(seq 100); do [ -s /etc/soda/ca/llm.pem ] && [ -s /etc/soda/ca/gh.pem ] && break; sleep 0.1; done
cat > /etc/soda/sandbox/keys.conf <<'CONF'
[Profile]
Description=keys kept by sodad
Users=alice
[Grants]
AllowPrivate=127.0.0.1:18996
[Keys]
LoadCredential=ANTHROPIC_API_KEY:/etc/soda/credentials/anthropic
LoadCredential=GH_TOKEN:/etc/soda/credentials/gh
LLM=anthropic=https://127.0.0.1:18997
Secret=GH_TOKEN@127.0.0.1:18996
UpstreamCA=/etc/soda/ca/llm.pem /etc/soda/ca/gh.pem
CONF
`, art, llmKey, ghToken)))
	t.Cleanup(func() { b.run("systemctl", "stop", "soda-test-fake-llm", "soda-test-fake-gh") })
	call := filepath.Join(art, "sodadcall")
	probe := `curl -sS -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d '{}' "$ANTHROPIC_BASE_URL/v1/messages"; echo
curl -sS --noproxy '' -H "Authorization: token $GH_TOKEN" https://127.0.0.1:18996/repos/x
echo "placeholder: $GH_TOKEN"; env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; echo end`
	r := as("alice", call, "-profile", "keys", "--", "sh", "-c", probe)
	t.Logf("alice's sandbox of profile keys:\n%s", lastLines(r.stdout, 6))
	if r.err != nil || !strings.Contains(r.stdout, "fakeupstream-answer") || !strings.Contains(r.stdout, "fakeupstream ok /repos/x") ||
		!strings.Contains(r.stdout, "placeholder: soda-placeholder-gh_token-") || !strings.Contains(r.stdout, "\nend") {
		t.Errorf("alice, profile keys: want the model's answer and the forge's through sodad's keys:\n%s", r)
	}
	if strings.Contains(r.stdout+r.stderr, llmKey) || strings.Contains(r.stdout+r.stderr, ghToken) {
		t.Errorf("a real value is readable in alice's sandbox:\n%s", r)
	}
	if got := b.run("cat", "/run/fake-llm.log").stdout; !strings.Contains(got, "x-api-key="+llmKey) {
		t.Errorf("the model upstream did not get the real key:\n%s", got)
	}
	if got := b.run("cat", "/run/fake-gh.log").stdout; !strings.Contains(got, "authorization=token "+ghToken) {
		t.Errorf("the forge did not get the real token:\n%s", got)
	}
	// sodad's metrics count the model's tokens (the fake reports 5 in, 3 out).
	waitFor(t, 15*time.Second, "soda_llm_tokens_total in sodad's textfile", func() bool {
		return strings.Contains(b.run("cat", "/run/soda/metrics/sodad.prom").stdout, `soda_llm_tokens_total{kind="input",provider="anthropic"} 5`)
	})
	// Not from the host either: the files are root's, the bus names them.
	if r := as("alice", "cat", "/etc/soda/credentials/anthropic"); r.err == nil {
		t.Errorf("alice reads the credential file:\n%s", r)
	}
	r = as("alice", call, "-profile", "keys", "-no-wait", "-no-stdio", "--", "sleep", "304")
	if r.err != nil {
		t.Fatalf("alice: profile keys, sleep 304:\n%s", r)
	}
	sid := strings.TrimSpace(r.stdout)
	st := as("alice", "/usr/bin/sodactl", "sandbox", "status", sid)
	if !strings.Contains(st.stdout, "llm anthropic https://127.0.0.1:18997") || !strings.Contains(st.stdout, "secret GH_TOKEN 127.0.0.1:18996") ||
		!strings.Contains(st.stdout, "Model tokens:") {
		t.Errorf("sodactl sandbox status lacks the Keys:\n%s", st)
	}
	as("alice", "/usr/bin/sodactl", "sandbox", "kill", "--signal", "KILL", sid)
	if j := b.run("journalctl", "--no-pager", "-o", "json").stdout; strings.Contains(j, llmKey) || strings.Contains(j, ghToken) {
		var where []string
		for _, l := range strings.Split(j, "\n") {
			if strings.Contains(l, llmKey) || strings.Contains(l, ghToken) {
				where = append(where, strings.NewReplacer(llmKey, "<KEY>", ghToken, "<TOKEN>").Replace(l))
			}
		}
		t.Errorf("the journal holds a real value:\n%s", strings.Join(where, "\n"))
	} else if !strings.Contains(j, "sandbox model request") {
		t.Error("the journal lacks the model request's audit record")
	}
	// A credential others may read is refused, and says why.
	b.run("chmod", "0644", "/etc/soda/credentials/gh")
	if r := as("alice", call, "-profile", "keys", "--", "true"); r.err == nil || strings.Contains(r.stderr, ghToken) {
		t.Errorf("a world-readable credential: want a refusal:\n%s", r)
	}
	b.run("chmod", "0600", "/etc/soda/credentials/gh")
}

// sodadMetrics: sodad --metrics-textfile writes its sandboxes' metrics
// for node_exporter, and sodactl top --once shows them (issue 16). A
// sandbox of the dev profile tries a target it is not granted; the
// counters move as that says.
func sodadMetrics(t *testing.T, b *box, as func(string, ...string) result) {
	t.Helper()
	const file = "/run/soda/metrics/sodad.prom"
	read := func() string { return b.run("cat", file).stdout }
	metric := func(text, name string) float64 {
		var total float64
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
				var v float64
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
				total += v
			}
		}
		return total
	}
	before := read()
	started, denied := metric(before, "soda_sandboxes_started_total"), metric(before, "soda_sandbox_egress_total{decision=\"deny\"")
	if !strings.Contains(before, "soda_build_info{daemon=\"sodad\"") {
		t.Fatalf("%s: no metrics from sodad:\n%s", file, before)
	}
	r := as("alice", "sh", "-c", "cd / && /usr/bin/sodactl run --profile dev -- sh -c 'curl -s -m 5 https://denied.example.com/ >/dev/null; true' </dev/null")
	if r.err != nil {
		t.Fatalf("a sandbox trying a target it is not granted:\n%s", r)
	}
	deadline := time.Now().Add(3 * metrics.TextfileInterval)
	var after string
	for {
		after = read()
		if metric(after, "soda_sandboxes_started_total") >= started+1 && metric(after, "soda_sandbox_egress_total{decision=\"deny\"") >= denied+1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := metric(after, "soda_sandboxes_started_total"); got < started+1 {
		t.Errorf("soda_sandboxes_started_total %v, want at least %v:\n%s", got, started+1, after)
	}
	if !strings.Contains(after, `soda_sandbox_egress_total{decision="deny",kind="connect",reason="not_allowed"}`) {
		t.Errorf("no denied connect counted as not_allowed:\n%s", after)
	}
	if strings.Contains(after, "denied.example.com") {
		t.Errorf("a host name in the metrics' labels:\n%s", after)
	}
	r = as("", "/usr/bin/sodactl", "top", "--once", "--interval", "300ms")
	if r.err != nil || !regexp.MustCompile(`(?m)^sodad +\d+ +\d+ +[1-9]\d*$`).MatchString(r.stdout) {
		t.Errorf("sodactl top --once: want sodad's row with its denied egress:\n%s", r)
	} else {
		t.Logf("sodactl top --once:\n%s", r.stdout)
	}
}

// sodadPhases reads the last n CreateSandbox calls' phases from sodad's
// debug lines in the journal (SODA_* fields of "polkit check", "sandbox
// started" and "sandbox created") and gives each one's median.
func sodadPhases(t *testing.T, b *box, n int) string {
	t.Helper()
	out := b.run("journalctl", "-u", "sodad", "-o", "json", "--no-pager").stdout
	want := []struct{ event, field, name string }{
		{"polkit check", "SODA_TOOK", "polkit"},
		{"sandbox created", "SODA_CALLER", "caller's credentials"},
		{"sandbox created", "SODA_ADMIT", "admit (polkit included)"},
		{"sandbox started", "SODA_CLONE", "clone init"},
		{"sandbox started", "SODA_PLACE", "place in its scope"},
		{"sandbox started", "SODA_READY", "init ready after placement"},
		{"sandbox created", "SODA_START", "engine start"},
		{"sandbox created", "SODA_TOTAL", "total"},
		{"sandbox exit reported", "SODA_WAIT", "command's run and reaping"},
	}
	seen := map[string][]time.Duration{}
	for _, line := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		ev, _ := e["SODA_EVENT"].(string)
		for _, w := range want {
			if v, ok := e[w.field].(string); ok && ev == w.event {
				if d, err := time.ParseDuration(v); err == nil {
					seen[w.name] = append(seen[w.name], d)
				}
			}
		}
	}
	var parts []string
	for _, w := range want {
		ds := seen[w.name]
		if len(ds) > n {
			ds = ds[len(ds)-n:]
		}
		if len(ds) > 0 {
			ds = slices.Clone(ds)
			slices.Sort(ds)
			parts = append(parts, fmt.Sprintf("%s %s", w.name, ds[len(ds)/2].Round(10*time.Microsecond)))
		}
	}
	return strings.Join(parts, ", ")
}
