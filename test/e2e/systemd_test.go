package e2e

import (
	"crypto/rand"
	"encoding/hex"
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
)

// Ports of the instances in the box (its own network namespace: nothing
// leaves its loopback).
const (
	portEverything = "18101"
	portEcho       = "18102"
	portHog        = "18103"
	portSessions   = "18110"
	portMetered    = "18111"
)

// figures are the measured numbers, written to test/e2e/results.md.
type figures struct {
	cgroup          string
	systemd         string
	kernel          string
	exposure        string
	benchRuns       []float64
	benchMedian     float64
	benchMin        float64
	benchMax        float64
	exitIdleAfter   time.Duration
	restartTook     time.Duration
	restartProbes   string
	lateClient      string
	killMain        string   // kill -9 of soda-mcpd with 3 sessions
	killSupervisors []string // supervisors, then soda-mcpd, killed
	stopSessions    string   // systemctl stop with 3 sessions
	subtestOutcomes []string
}

// env is what every subtest shares.
type env struct {
	b      *box
	repo   string
	art    string // host directory bound read-only into the box
	secret string
	fig    *figures
}

func TestSystemd(t *testing.T) {
	if os.Getenv("SODA_E2E") != "1" {
		t.Skip("end-to-end systemd suite runs with `make test-e2e` (SODA_E2E=1): it boots a systemd box and installs the .deb")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root and test/box/sdbox check: not running as root (uid %d)", os.Geteuid())
	}
	repo := repoRoot(t)
	sdbox := filepath.Join(repo, "test", "box", "sdbox")
	for _, private := range []string{"/tmp/", "/var/tmp/"} {
		if strings.HasPrefix(repo+"/", private) {
			// The children run node scripts from the checkout, and the
			// service has PrivateTmp=yes.
			t.Fatalf("the checkout %s is under %s, which soda-mcp@.service hides (PrivateTmp=yes): run the e2e tests from a checkout elsewhere", repo, private)
		}
	}
	mode := os.Getenv("SODA_E2E_CGROUP")
	if mode == "" {
		mode = "hybrid"
		if out, err := exec.Command(sdbox, "check", "--cgroup", "hybrid").CombinedOutput(); err != nil {
			t.Logf("no --cgroup hybrid on this host, using v2 (limits may not be enforced):\n%s", out)
			mode = "v2"
		}
	}
	out, err := exec.Command(sdbox, "check", "--cgroup", mode).CombinedOutput()
	if err != nil {
		t.Skipf("needs root and test/box/sdbox check: %s", strings.TrimSpace(string(out)))
	}
	t.Logf("%s", strings.TrimSpace(string(out)))

	everything := filepath.Join(repo, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	sdk := filepath.Join(repo, "test/node/node_modules/@modelcontextprotocol/sdk/package.json")
	for _, f := range []string{everything, sdk} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make deps-test` first (npm ci in test/node)", f)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not installed (needed for server-everything and the TypeScript SDK client)")
	}

	// ---- build what goes into the box
	art := t.TempDir()
	deb := buildDeb(t, repo)
	t.Logf("package: %s", deb)
	for _, p := range []string{"mcpecho", "sessioncall", "validatecall"} {
		gobuild := exec.Command("go", "build", "-o", filepath.Join(art, p), "./test/"+p)
		gobuild.Dir = repo
		if out, err := gobuild.CombinedOutput(); err != nil {
			t.Fatalf("build test/%s: %v\n%s", p, err, out)
		}
	}
	copyFile(t, deb, filepath.Join(art, "soda.deb"))

	// ---- boot the box
	b := bootBox(t, sdbox, "--cgroup", mode, "--bind", repo, "--bind-ro", art, "--timeout", "60")

	e := &env{b: b, repo: repo, art: art, secret: "e2e-secret-" + randomHex(12), fig: &figures{cgroup: mode}}
	e.fig.systemd = strings.SplitN(b.run("systemctl", "--version").stdout, "\n", 2)[0]
	e.fig.kernel = strings.TrimSpace(b.run("uname", "-r").stdout)
	e.setup(t, everything)

	steps := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"a_nothing_runs_before_first_connection", e.testNoProcessBeforeConnect},
		{"b_sdk_client_through_socket_activation", e.testSDKClient},
		{"c_status_and_journal_fields", e.testStatusAndJournal},
		{"d_child_scope_with_limits", e.testScope},
		{"e_memory_hog_killed_others_carry_on", e.testMemoryHog},
		{"h_credential_reaches_child_only", e.testCredential},
		{"l_child_least_privilege", e.testChildPrivileges},
		{"m_child_user_nobody", e.testChildUser},
		{"n_kill_mainpid_leaves_nothing", e.testKillMainPID},
		{"o_kill_supervisors_then_mainpid_nothing_left", e.testKillSupervisors},
		{"p_stop_with_sessions_leaves_nothing", e.testStopSessions},
		{"f_restart_with_call_in_flight", e.testRestart},
		{"g_stop_leaves_nothing", e.testStop},
		{"i_verify_and_security", e.testVerify},
		{"k_benchmark_activation_and_exit_idle", e.testBenchmark},
		{"q_packaged_sodactl_runs_a_sandbox", e.testPackagedSandbox},
		{"r_sessions_over_streamable_http", e.testSessionsHTTP},
		{"s_validate_shellcheck_from_the_package", e.testValidateUnit},
		{"t_metrics_of_a_unit", e.testMetricsUnit},
		{"u_sandbox_slice_collective_cpu_quota", e.testSandboxSliceQuota},
		{"j_remove_package_leaves_nothing", e.testRemove},
	}
	for _, s := range steps {
		ran, skipped := false, false
		ok := t.Run(s.name, func(t *testing.T) {
			ran = true
			b.onFailJournal(t)
			t.Cleanup(func() { skipped = t.Skipped() })
			s.fn(t)
		})
		outcome := "PASS"
		switch {
		case !ran:
			outcome = "not run (-run)"
		case !ok:
			outcome = "FAIL"
		case skipped:
			outcome = "SKIP"
		}
		e.fig.subtestOutcomes = append(e.fig.subtestOutcomes, outcome+" "+s.name)
	}
	e.writeResults(t)
}

// cleanStaleBoxes tears down the boxes of earlier runs whose test process
// is gone (killed by go test's timeout, for example).
func cleanStaleBoxes(t *testing.T, sdbox string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "soda-e2e-box.*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(d), "."))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that run is still going
		}
		out, _ := exec.Command(sdbox, "down", d).CombinedOutput()
		t.Logf("tore down the box of an earlier, interrupted run (%s): %s", d, strings.TrimSpace(string(out)))
	}
}

// buildDeb returns the .deb to install: $SODA_E2E_DEB, or the one
// "make deb" builds (packaging.mk, included by the Makefile or not).
func buildDeb(t *testing.T, repo string) string {
	t.Helper()
	if f := os.Getenv("SODA_E2E_DEB"); f != "" {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("SODA_E2E_DEB: %v", err)
		}
		return f
	}
	if _, err := os.Stat(filepath.Join(repo, "packaging.mk")); err != nil {
		t.Fatalf("packaging.mk is missing: the .deb cannot be built (set SODA_E2E_DEB=FILE to test a built one)")
	}
	args := []string{"-C", repo, "deb"}
	if mk, _ := os.ReadFile(filepath.Join(repo, "Makefile")); !regexp.MustCompile(`(?m)^-?include .*packaging\.mk`).Match(mk) {
		args = []string{"-C", repo, "-f", "Makefile", "-f", "packaging.mk", "deb"}
	}
	cmd := exec.Command("make", args...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("make %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	debs, _ := filepath.Glob(filepath.Join(repo, "dist", "soda_*_amd64.deb"))
	if len(debs) == 0 {
		t.Fatal("make deb built no dist/soda_*_amd64.deb")
	}
	slices.SortFunc(debs, func(a, b string) int { return modTime(b).Compare(modTime(a)) })
	return debs[0]
}

func modTime(p string) time.Time {
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// setup installs the package and the three instances, then starts their
// sockets.
func (e *env) setup(t *testing.T, everything string) {
	b := e.b
	done := false
	defer func() {
		if !done { // t.Fatal in here: show why
			b.journalTail(t, 60)
		}
	}()
	must(t, b.exec(runOpts{timeout: 120 * time.Second}, "dpkg", "-i", filepath.Join(e.art, "soda.deb")))
	must(t, b.run("install", "-m", "0755", filepath.Join(e.art, "mcpecho"), "/usr/local/bin/mcpecho"))
	b.write(t, "/etc/soda/mcp/everything.conf", fmt.Sprintf(`[Server]
ExecStart=node %s stdio

[Bridge]
Listen=127.0.0.1:%s
`, everything, portEverything), "0644")
	e.writeEchoConf(t, "")
	b.write(t, "/etc/soda/mcp/hog.conf", fmt.Sprintf(`# A stdio server that can eat memory (tool hog) and print its environment
# (tool env): MemoryMax= and credentials.
[Server]
ExecStart=node %s
Credential=demo:DEMO_SECRET

[Bridge]
Listen=127.0.0.1:%s

[Limits]
MemoryMax=64M
TasksMax=32
`, filepath.Join(e.repo, "test/e2e/hog.mjs"), portHog), "0644")
	b.write(t, "/etc/soda/demo.secret", e.secret, "0600")
	for _, name := range []string{"echo", "hog"} {
		b.write(t, "/etc/systemd/system/soda-mcp@"+name+".service.d/cred.conf",
			"[Service]\nLoadCredential=demo:/etc/soda/demo.secret\n", "0644")
	}
	e.setupChildren(t)
	must(t, b.run("systemctl", "daemon-reload"))
	must(t, b.run("systemctl", "start", "soda-mcp@everything.socket", "soda-mcp@echo.socket", "soda-mcp@hog.socket",
		"soda-mcp@probe.socket", "soda-mcp@nobody.socket", "soda-mcp@kill.socket"))
	done = true
}

// testSessionsHTTP: the sandbox_* tools over Streamable HTTP, on a
// socket-activated loopback unit behind the bridge's token: soda-mcp@sandbox
// runs `sodactl sandbox mcp --profile sessions` per client session, as the
// bridge's user soda-mcp, whose sandboxes sodad makes within the profile
// (a polkit rule lets soda-mcp create). The go-sdk client drives a whole
// session; without the token it gets 401.
func (e *env) testSessionsHTTP(t *testing.T) {
	b := e.b
	b.write(t, "/etc/soda/mcp/sandbox.conf", "[Server]\nExecStart=/usr/bin/sodactl sandbox mcp --profile sessions\n\n[Bridge]\nListen=127.0.0.1:"+portSessions+"\n", "0644")
	b.write(t, "/etc/soda/sandbox/sessions.conf", "[Profile]\nDescription=agent sessions over HTTP\nUsers=soda-mcp\n[Grants]\nNoNetwork=yes\n", "0644")
	b.write(t, "/etc/polkit-1/rules.d/60-soda-sessions.rules", `polkit.addRule(function(action, subject) {
    if (action.id == "io.github.soda_project.soda1.create" && subject.user == "soda-mcp") {
        return polkit.Result.YES;
    }
});
`, "0644")
	must(t, b.run("systemctl", "daemon-reload"))
	must(t, b.run("systemctl", "start", "soda-mcp@sandbox.socket"))
	call := filepath.Join(e.art, "sessioncall")
	if r := b.run(call, "-url", "http://127.0.0.1:"+portSessions+"/mcp", "-token", "not-the-token"); r.err == nil || !strings.Contains(r.stdout+r.stderr, "Unauthorized") && !strings.Contains(r.stdout+r.stderr, "401") {
		t.Errorf("sessions over HTTP with a wrong token: want 401\n%s", r)
	}
	tok := ""
	deadline := time.Now().Add(10 * time.Second)
	for r := b.run("sodactl", "mcp", "token", "sandbox"); ; r = b.run("sodactl", "mcp", "token", "sandbox") {
		if r.err == nil {
			tok = strings.TrimSpace(r.stdout)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token for soda-mcp@sandbox: %s", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := b.exec(runOpts{timeout: 120 * time.Second}, call, "-url", "http://127.0.0.1:"+portSessions+"/mcp", "-token", tok)
	if r.err != nil || !strings.Contains(r.stdout, "ok close") {
		t.Fatalf("a session over Streamable HTTP:\n%s\n%s", r, b.run("journalctl", "-u", "soda-mcp@sandbox.service", "-u", "sodad", "--no-pager", "-n", "40").stdout)
	}
	t.Logf("a session over Streamable HTTP through soda-mcp@sandbox and sodad: %s", strings.ReplaceAll(strings.TrimSpace(r.stdout), "\n", "; "))
	// The closed sandbox is gone; the server keeps one started ahead (its
	// spare) while it runs, and its end (the bridge stopping it) ends that.
	units := func() []string {
		return strings.Fields(b.run("sh", "-c", "systemctl list-units --no-legend --plain 'soda-sandbox-*' | grep -v inactive | cut -d' ' -f1").stdout)
	}
	if u := units(); len(u) > 1 {
		t.Errorf("after the session closed, %d sandbox units run (the spare at most): %v", len(u), u)
	}
	must(t, b.run("systemctl", "stop", "soda-mcp@sandbox.socket", "soda-mcp@sandbox.service"))
	for deadline := time.Now().Add(15 * time.Second); len(units()) > 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	if u := units(); len(u) > 0 {
		t.Errorf("sandbox units left 15 s after soda-mcp@sandbox stopped: %v", u)
	}
}

// testValidateUnit: the packaged shellcheck example as
// soda-validate@shellcheck: the generator gives the socket its port, the
// first connection starts the worker and makes its token, an MCP client
// gets attested verdicts for a valid and an invalid script; kill -9 of the
// worker, then a new call: systemd restarts it, it recovers, the call
// works; stopping leaves no sandbox behind.
func (e *env) testValidateUnit(t *testing.T) {
	b := e.b
	if b.run("test", "-x", "/usr/bin/shellcheck").err != nil {
		t.Fatal("shellcheck is not installed on the host (.ci/run installs it)")
	}
	must(t, b.sh("install -D -m 0644 /usr/share/doc/soda/examples/validate/shellcheck.conf /etc/soda/validate/shellcheck.conf && systemctl daemon-reload && systemctl start soda-validate@shellcheck.socket"))
	if l := b.run("systemctl", "show", "-P", "Listen", "soda-validate@shellcheck.socket").stdout; !strings.Contains(l, "127.0.0.1:18120") {
		t.Fatalf("soda-validate@shellcheck.socket listens on %q: the generator's drop-in is missing", l)
	}
	tokenFile := "/var/lib/soda/validate/shellcheck/token"
	if code := strings.TrimSpace(b.run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:18120/ready").stdout); code != "401" {
		t.Errorf("/ready without the token: %s, want 401", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.run("test", "-s", tokenFile).err != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no token after the first connection:\n%s", b.run("journalctl", "-u", "soda-validate@shellcheck", "--no-pager", "-n", "20").stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := b.sh("curl -s -H \"Authorization: Bearer $(cat " + tokenFile + ")\" http://127.0.0.1:18120/ready"); strings.TrimSpace(r.stdout) != "ready" {
		t.Errorf("/ready with the token: %s", r)
	}
	// The 401 names the command that prints the token, and that command
	// and the client snippet read what the worker wrote (its owner
	// record: address and token file).
	if r := b.run("curl", "-s", "http://127.0.0.1:18120/ready"); !strings.Contains(r.stdout, "sodactl validate token shellcheck") {
		t.Errorf("401 body does not name sodactl validate token shellcheck: %s", r)
	}
	if r := b.sh("curl -s -H \"Authorization: Bearer $(sodactl validate token shellcheck)\" http://127.0.0.1:18120/ready"); strings.TrimSpace(r.stdout) != "ready" {
		t.Errorf("/ready with the token of sodactl validate token: %s", r)
	}
	if r := b.run("sodactl", "validate", "client-config", "shellcheck", "--client", "claude"); r.err != nil ||
		!strings.Contains(r.stdout, "validate-shellcheck http://127.0.0.1:18120/mcp") || !strings.Contains(r.stdout, "Authorization: Bearer ") {
		t.Errorf("sodactl validate client-config shellcheck --client claude: %s", r)
	}
	call := func(file string) map[string]any {
		t.Helper()
		r := b.exec(runOpts{timeout: 120 * time.Second}, filepath.Join(e.art, "validatecall"), "-url", "http://127.0.0.1:18120/mcp", "-token-file", tokenFile, file)
		var v map[string]any
		if r.err != nil || json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &v) != nil {
			t.Fatalf("validatecall %s: %s", file, r)
		}
		return v
	}
	good := call(`ok.sh=#!/bin/bash\necho "$1"\n`)
	if good["completed"] != true || good["verdict"] != "valid" || good["cleanup"] != "clean" {
		t.Errorf("a valid script: %v", good)
	}
	// Type=notify: active only once READY=1 came, with its status line,
	// and watched.
	show := func(prop string) string {
		return strings.TrimSpace(b.run("systemctl", "show", "-P", prop, "soda-validate@shellcheck.service").stdout)
	}
	if typ, st, wd := show("Type"), show("StatusText"), show("WatchdogUSec"); typ != "notify" || !strings.HasPrefix(st, "serving shellcheck") || wd != "30s" {
		t.Errorf("soda-validate@shellcheck.service: Type=%s StatusText=%q WatchdogUSec=%s; want notify, READY=1's status, 30s", typ, st, wd)
	}
	bad := call(`bad.sh=#!/bin/bash\necho $1\n`)
	diags, _ := json.Marshal(bad["diagnostics"])
	if bad["completed"] != true || bad["verdict"] != "invalid" || !strings.Contains(string(diags), "SC2086") {
		t.Errorf("an invalid script: %v", bad)
	}
	att, _ := bad["attestation"].(map[string]any)
	if att["predicateType"] != "https://in-toto.io/attestation/test-result/v0.1" {
		t.Errorf("attestation: %v", att)
	}
	t.Logf("soda-validate@shellcheck: valid script %v, invalid script %v with %s", good["status"], bad["status"], diags)

	pid := strings.TrimSpace(must(t, b.run("systemctl", "show", "-P", "MainPID", "soda-validate@shellcheck.service")))
	must(t, b.run("kill", "-9", pid))
	time.Sleep(1500 * time.Millisecond) // RestartSec=1s
	again := call(`ok.sh=#!/bin/bash\necho "$1"\n`)
	if again["verdict"] != "valid" {
		t.Errorf("after kill -9 of the worker: %v", again)
	}
	if p := strings.TrimSpace(b.run("systemctl", "show", "-P", "MainPID", "soda-validate@shellcheck.service").stdout); p == pid || p == "0" {
		t.Errorf("the worker's pid after kill -9: %s (was %s)", p, pid)
	}
	if rec := b.run("cat", "/var/lib/soda/validate/shellcheck/owner.json").stdout; !strings.Contains(rec, `"kind": "shellcheck"`) {
		t.Errorf("owner record: %s", rec)
	}
	must(t, b.run("systemctl", "stop", "soda-validate@shellcheck.socket", "soda-validate@shellcheck.service"))
	if out := strings.TrimSpace(b.run("sh", "-c", "systemctl list-units --no-legend 'soda-sandbox-*' | grep -v inactive || true").stdout); out != "" {
		t.Errorf("sandbox units left after soda-validate@shellcheck stopped:\n%s", out)
	}
}

func (e *env) writeEchoConf(t *testing.T, bridgeExtra string) {
	e.b.write(t, "/etc/soda/mcp/echo.conf", fmt.Sprintf(`[Server]
ExecStart=/usr/local/bin/mcpecho
Credential=demo:DEMO_SECRET

[Bridge]
Listen=127.0.0.1:%s
%s
[Limits]
MemoryMax=64M
TasksMax=32
`, portEcho, bridgeExtra), "0644")
}

// ---- helpers in the box

func (e *env) client() string { return filepath.Join(e.repo, "test/e2e/client.mjs") }

// pids lists the PIDs matching pgrep's arguments (none: empty).
func (e *env) pids(t *testing.T, pgrepArgs ...string) []string {
	t.Helper()
	r := e.b.run(append([]string{"pgrep"}, pgrepArgs...)...)
	if r.code == 1 {
		return nil
	}
	must(t, r)
	return strings.Fields(r.stdout)
}

func (e *env) show(t *testing.T, unit, prop string) string {
	t.Helper()
	return strings.TrimSpace(must(t, e.b.run("systemctl", "show", "-p", prop, "--value", unit)))
}

// token returns the bearer token of instance name, activating the service
// first if soda-mcpd has not created it yet.
func (e *env) token(t *testing.T, name, port string) string {
	t.Helper()
	r := e.b.run("sodactl", "mcp", "token", name)
	if r.err != nil {
		// soda-mcpd creates the token on its first start: one connection.
		e.b.run("node", e.client(), "unauth", port)
		deadline := time.Now().Add(10 * time.Second)
		for r = e.b.run("sodactl", "mcp", "token", name); r.err != nil && time.Now().Before(deadline); r = e.b.run("sodactl", "mcp", "token", name) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return strings.TrimSpace(must(t, r))
}

// callTool runs one SDK session with one tools/call.
func (e *env) callTool(t *testing.T, tok, port, tool, args string) clientResult {
	t.Helper()
	r := e.b.exec(runOpts{timeout: 60 * time.Second, env: []string{"SODA_TOKEN=" + tok}}, "node", e.client(), "call", port, tool, args)
	if r.stdout == "" {
		t.Fatalf("client gave no result:\n%s", r)
	}
	return parseClient(t, lastLine(r.stdout))
}

// cgroupOf returns the systemd cgroup path of pid in the box (the
// name=systemd hierarchy on hybrid, the unified one on v2).
func (e *env) cgroupOf(t *testing.T, pid string) string {
	t.Helper()
	out := must(t, e.b.run("cat", "/proc/"+pid+"/cgroup"))
	unified := ""
	for _, l := range strings.Split(out, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "name=systemd" {
			return parts[2]
		}
		if parts[0] == "0" {
			unified = parts[2]
		}
	}
	return unified
}

// checkScope fails t unless cg is a transient scope in soda-mcp.slice, and
// returns the scope's unit name.
func checkScope(t *testing.T, what, cg string) string {
	t.Helper()
	unit := filepath.Base(cg)
	if !strings.HasSuffix(unit, ".scope") || !strings.Contains(cg, "/soda-mcp.slice/") {
		t.Fatalf("%s runs in cgroup %s, not in a transient scope under soda-mcp.slice: "+
			"the per-child scope feature (StartTransientUnit, internal/child) is missing or not used by soda-mcpd", what, cg)
	}
	return unit
}

func (e *env) testNoProcessBeforeConnect(t *testing.T) {
	if p := e.pids(t, "-x", "soda-mcpd"); len(p) > 0 {
		t.Errorf("soda-mcpd runs before any connection: pids %v\n%s", p, e.b.run("ps", "-eo", "pid,args"))
	}
	for _, name := range []string{"everything", "echo", "hog"} {
		if st := e.show(t, "soda-mcp@"+name+".socket", "ActiveState"); st != "active" {
			t.Errorf("soda-mcp@%s.socket is %s, want active (listening)", name, st)
		}
		if st := e.show(t, "soda-mcp@"+name+".service", "ActiveState"); st != "inactive" {
			t.Errorf("soda-mcp@%s.service is %s before any connection, want inactive", name, st)
		}
	}
	listen := e.show(t, "soda-mcp@everything.socket", "Listen")
	if !strings.Contains(listen, "127.0.0.1:"+portEverything) {
		t.Errorf("soda-mcp@everything.socket listens on %q: the generator's drop-in (Listen=127.0.0.1:%s) is missing", listen, portEverything)
	}
}

func (e *env) testSDKClient(t *testing.T) {
	b := e.b
	// soda-mcpd creates the token on its first start, and sodactl never
	// does: so a client's first connection activates the service.
	if r := b.run("sodactl", "mcp", "token", "everything"); r.err == nil {
		t.Logf("note: a token existed before the first start")
	} else {
		t.Logf("before the first connection, sodactl mcp token says: %s", strings.TrimSpace(r.stderr))
	}
	r := parseClient(t, lastLine(must(t, b.run("node", e.client(), "unauth", portEverything))))
	if r.Status != 401 {
		t.Fatalf("first connection (no token): status %d %s, want 401 from a socket-activated soda-mcpd", r.Status, r.Error)
	}
	if st := e.show(t, "soda-mcp@everything.service", "ActiveState"); st != "active" {
		t.Fatalf("after the first connection soda-mcp@everything.service is %s, want active", st)
	}
	tok := e.token(t, "everything", portEverything)
	start := time.Now()
	c := e.callTool(t, tok, portEverything, "echo", `{"message":"hello from the TypeScript SDK"}`)
	if !c.OK || !strings.Contains(c.Text, "hello from the TypeScript SDK") {
		t.Fatalf("tools/call echo through soda-mcp@everything: %+v", c)
	}
	t.Logf("SDK session %s: tools/call echo answered %q (client run %s, session %.0f ms)", c.SessionID, c.Text, time.Since(start).Round(time.Millisecond), c.MS)
	if !strings.Contains(must(t, b.run("journalctl", "-u", "soda-mcp@everything.service", "-o", "cat", "--no-pager")), "socket_activated=true") {
		t.Errorf("soda-mcpd did not log socket_activated=true")
	}
}

func (e *env) testStatusAndJournal(t *testing.T) {
	b := e.b
	tok := e.token(t, "everything", portEverything)
	c := e.callTool(t, tok, portEverything, "echo", `{"message":"journal"}`)
	if !c.OK {
		t.Fatalf("tools/call echo: %+v", c)
	}
	st := must(t, b.run("systemctl", "status", "--no-pager", "-n", "0", "soda-mcp@everything.service"))
	m := regexp.MustCompile(`(?m)^\s*Status: "(\d+ sessions, \d+ children, \d+ calls in the last minute)"`).FindStringSubmatch(st)
	if m == nil {
		t.Errorf("systemctl status shows no STATUS= line \"N sessions, N children, N calls in the last minute\":\n%s", st)
	} else {
		t.Logf("systemctl status: Status: %q", m[1])
	}

	// journald: native fields. The session's records may take a moment.
	var sessionField string
	var records []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for {
		records = journalJSON(t, b, "-u", "soda-mcp@everything.service")
		for _, r := range records {
			s, _ := r["SODA_SESSION"].(string)
			if s != "" && strings.HasPrefix(c.SessionID, s) && r["SODA_EVENT"] == "session end" {
				sessionField = s
			}
		}
		if sessionField != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	withBoth := 0
	for _, r := range records {
		if r["SODA_SESSION"] != nil && r["MESSAGE_ID"] != nil {
			withBoth++
		}
	}
	if withBoth == 0 {
		t.Errorf("journalctl -u soda-mcp@everything.service -o json: no record with both SODA_SESSION and MESSAGE_ID (of %d)", len(records))
	}
	if sessionField == "" {
		t.Fatalf("no \"session end\" record whose SODA_SESSION is a prefix of the session id %s", c.SessionID)
	}
	bySession := journalJSON(t, b, "SODA_SESSION="+sessionField)
	events := map[string]bool{}
	for _, r := range bySession {
		if ev, ok := r["SODA_EVENT"].(string); ok {
			events[ev] = true
		}
	}
	for _, want := range []string{"session start", "session end"} {
		if !events[want] {
			t.Errorf("journalctl SODA_SESSION=%s lacks a %q record (events: %v)", sessionField, want, events)
		}
	}
	t.Logf("journal: %d records with SODA_SESSION and MESSAGE_ID; journalctl SODA_SESSION=%s finds %d records (%v)",
		withBoth, sessionField, len(bySession), slices.Sorted(func(yield func(string) bool) {
			for k := range events {
				if !yield(k) {
					return
				}
			}
		}))
}

func journalJSON(t *testing.T, b *box, match ...string) []map[string]any {
	t.Helper()
	out := must(t, b.run(append([]string{"journalctl", "-b", "--no-pager", "-o", "json"}, match...)...))
	var recs []map[string]any
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" || l == "-- No entries --" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

func (e *env) testScope(t *testing.T) {
	b := e.b
	tok := e.token(t, "echo", portEcho)
	hold := b.start(t, []string{"SODA_TOKEN=" + tok}, "node", e.client(), "hold", portEcho, "echo", `{"text":"scope"}`)
	first := parseClient(t, hold.next(t, 30*time.Second, "echo session"))
	if !first.OK {
		t.Fatalf("tools/call echo on soda-mcp@echo: %+v", first)
	}
	defer hold.finish(t, 10*time.Second)
	pids := e.pids(t, "-x", "mcpecho")
	if len(pids) != 1 {
		t.Fatalf("want one mcpecho child, got %v", pids)
	}
	cg := e.cgroupOf(t, pids[0])
	scope := checkScope(t, "the echo child (pid "+pids[0]+")", cg)
	props := must(t, b.run("systemctl", "show", "-p", "MemoryMax,TasksMax,Slice,ActiveState", scope))
	t.Logf("%s (%s):\n%s", scope, cg, props)
	for _, want := range []string{"MemoryMax=67108864", "TasksMax=32", "Slice=soda-mcp.slice", "ActiveState=active"} {
		if !strings.Contains(props, want) {
			t.Errorf("systemctl show %s: want %s", scope, want)
		}
	}
	// Enforced by the kernel, not only recorded by systemd.
	if e.fig.cgroup == "hybrid" {
		lim := strings.TrimSpace(b.run("cat", "/sys/fs/cgroup/memory"+cg+"/memory.limit_in_bytes").stdout)
		pmax := strings.TrimSpace(b.run("cat", "/sys/fs/cgroup/pids"+cg+"/pids.max").stdout)
		t.Logf("kernel: memory.limit_in_bytes=%s pids.max=%s", lim, pmax)
		if lim != "67108864" || pmax != "32" {
			t.Errorf("kernel limits of %s: memory.limit_in_bytes=%q pids.max=%q, want 67108864 and 32", scope, lim, pmax)
		}
	}
}

func (e *env) testMemoryHog(t *testing.T) {
	b := e.b
	if e.fig.cgroup != "hybrid" {
		if ctl := b.run("cat", "/sys/fs/cgroup/cgroup.controllers").stdout; !strings.Contains(ctl, "memory") {
			t.Skipf("the box has no memory controller (cgroup %s, controllers %q): MemoryMax= cannot be enforced on this host", e.fig.cgroup, strings.TrimSpace(ctl))
		}
	}
	tok := e.token(t, "hog", portHog)
	mainPID := e.show(t, "soda-mcp@hog.service", "MainPID")
	// Session B: stays open across A's death.
	sessB := b.start(t, []string{"SODA_TOKEN=" + tok}, "node", e.client(), "hold", portHog, "echo", `{"message":"B before"}`)
	rb := parseClient(t, sessB.next(t, 30*time.Second, "session B"))
	if !rb.OK {
		t.Fatalf("session B: tools/call echo: %+v", rb)
	}
	defer sessB.finish(t, 10*time.Second)
	// Session A: eats 200 MiB under MemoryMax=64M.
	ra := e.callTool(t, tok, portHog, "hog", `{"mb":200}`)
	t.Logf("session A, tools/call hog 200 MiB: %+v", ra)
	if ra.OK {
		t.Errorf("the hog child allocated 200 MiB under MemoryMax=64M: the limit is not applied to the child (its scope?)")
	} else if ra.Code != -32000 {
		t.Errorf("session A's error: code %d %q, want -32000 (child exited)", ra.Code, ra.Message)
	}
	// B carries on.
	fmt.Fprintln(sessB.stdin, `{"tool":"echo","args":{"message":"B after"}}`)
	rb2 := parseClient(t, sessB.next(t, 30*time.Second, "session B after A's death"))
	if !rb2.OK || !strings.Contains(rb2.Text, "B after") {
		t.Errorf("session B after session A's child was killed: %+v", rb2)
	}
	if st := e.show(t, "soda-mcp@hog.service", "ActiveState"); st != "active" {
		t.Errorf("soda-mcp@hog.service is %s after the child's OOM kill, want active", st)
	}
	if now := e.show(t, "soda-mcp@hog.service", "MainPID"); now != mainPID {
		t.Errorf("soda-mcpd's PID changed from %s to %s: the bridge restarted", mainPID, now)
	}
	for _, r := range journalJSON(t, b, "-u", "soda-mcp@hog.service", "SODA_EVENT=child exit") {
		t.Logf("journal: child exit session=%v status=%v", r["SODA_SESSION"], r["SODA_STATUS"])
	}
	if k := b.run("sh", "-c", "journalctl -k -b --no-pager | grep -i -m3 'memory cgroup out of memory\\|oom-kill'"); k.stdout != "" {
		t.Logf("kernel: %s", strings.TrimSpace(k.stdout))
	}
}

func (e *env) testCredential(t *testing.T) {
	b := e.b
	tok := e.token(t, "hog", portHog)
	r := e.callTool(t, tok, portHog, "env", `{"name":"DEMO_SECRET"}`)
	if !r.OK || r.Text != e.secret {
		t.Errorf("the child's $DEMO_SECRET is %q (%+v), want the credential's content", r.Text, r)
	} else {
		t.Logf("the child of soda-mcp@hog sees DEMO_SECRET (credential demo) with the right value")
	}
	// Hold a session so that a child runs while we look everywhere else.
	hold := b.start(t, []string{"SODA_TOKEN=" + tok}, "node", e.client(), "hold", portHog, "echo", `{"message":"x"}`)
	if h := parseClient(t, hold.next(t, 30*time.Second, "hog session")); !h.OK {
		t.Fatalf("hog session: %+v", h)
	}
	defer hold.finish(t, 10*time.Second)
	e.tokenForEcho(t) // echo's bridge runs too (it has the credential as well)

	places := map[string]string{}
	places["systemctl cat soda-mcp@hog.service soda-mcp@echo.service"] = must(t, b.run("systemctl", "cat", "soda-mcp@hog.service", "soda-mcp@echo.service"))
	places["systemctl show soda-mcp@hog.service"] = must(t, b.run("systemctl", "show", "soda-mcp@hog.service"))
	places["ps -eo pid,args"] = must(t, b.run("ps", "-eo", "pid,args"))
	places["journalctl -b -o export (every field of every record)"] = must(t, b.run("journalctl", "-b", "--no-pager", "-o", "export"))
	for _, unit := range []string{"soda-mcp@hog.service", "soda-mcp@echo.service"} {
		pid := e.show(t, unit, "MainPID")
		if pid == "0" {
			t.Errorf("%s is not running", unit)
			continue
		}
		for _, f := range []string{"environ", "cmdline"} {
			places[fmt.Sprintf("/proc/%s/%s (soda-mcpd of %s)", pid, f, unit)] = must(t, b.run("cat", "/proc/"+pid+"/"+f))
		}
	}
	for where, text := range places {
		if strings.Contains(text, e.secret) {
			t.Errorf("the secret appears in %s", where)
		}
	}
	t.Logf("secret absent from: %s", strings.Join(slices.Sorted(func(yield func(string) bool) {
		for k := range places {
			if !yield(k) {
				return
			}
		}
	}), "; "))
}

func (e *env) tokenForEcho(t *testing.T) {
	tok := e.token(t, "echo", portEcho)
	if r := e.callTool(t, tok, portEcho, "echo", `{"text":"up"}`); !r.OK {
		t.Errorf("soda-mcp@echo: tools/call echo: %+v", r)
	}
}

func (e *env) testRestart(t *testing.T) {
	b := e.b
	tok := e.token(t, "everything", portEverything)
	env := []string{"SODA_TOKEN=" + tok}
	oldPID := e.show(t, "soda-mcp@everything.service", "MainPID")
	long := b.start(t, env, "node", e.client(), "call", portEverything, "trigger-long-running-operation", `{"duration":5,"steps":5}`)
	probe := b.start(t, env, "node", e.client(), "probe", portEverything, "10000", "50")
	time.Sleep(2 * time.Second) // the 5 s call is in flight
	restartDone := make(chan result, 1)
	restartStart := time.Now()
	go func() {
		restartDone <- b.exec(runOpts{timeout: 60 * time.Second}, "systemctl", "restart", "soda-mcp@everything.service")
	}()
	time.Sleep(500 * time.Millisecond)
	late := b.start(t, env, "node", e.client(), "late", portEverything, "echo", `{"message":"opened during the restart"}`)

	lr := parseClient(t, long.next(t, 40*time.Second, "the long call"))
	rr := <-restartDone
	e.fig.restartTook = time.Since(restartStart)
	if rr.err != nil {
		t.Errorf("systemctl restart: %s", rr)
	}
	if !lr.OK || !strings.Contains(lr.Text, "completed") {
		t.Errorf("the call in flight during the restart: %+v, want its result (Long running operation completed)", lr)
	} else {
		t.Logf("in-flight call completed across the restart: %q after %.0f ms", lr.Text, lr.MS)
	}
	ll := parseClient(t, late.next(t, 40*time.Second, "the client opened during the restart"))
	var tries []string
	for _, a := range ll.Attempts {
		s := strconv.Itoa(a.Status)
		if a.Error != "" {
			s = a.Error
		}
		tries = append(tries, fmt.Sprintf("%s@%.0fms", s, a.AtMS))
	}
	e.fig.lateClient = fmt.Sprintf("initialize attempts %s; tools/call ok=%v", strings.Join(tries, ", "), ll.OK)
	if !ll.OK {
		t.Errorf("the client that connected during the restart was not served: %+v", ll)
	} else {
		t.Logf("client opened during the restart: %s", e.fig.lateClient)
	}
	for _, a := range ll.Attempts {
		if a.Error != "" {
			t.Errorf("the client opened during the restart saw a connection error: %s", a.Error)
		}
	}
	pr := parseClient(t, probe.next(t, 40*time.Second, "the connection probe"))
	e.fig.restartProbes = fmt.Sprintf("%d connections every 50 ms for 10 s: %v, longest wait %.0f ms", pr.Probes, pr.Count, pr.MaxWaitMS)
	t.Logf("systemctl restart took %s; probes: %s", e.fig.restartTook.Round(time.Millisecond), e.fig.restartProbes)
	for k, n := range pr.Count {
		if k != "200" && k != "503" {
			t.Errorf("%d of %d connections during the restart failed with %s (want none refused)", n, pr.Probes, k)
		}
	}
	// Which ones, against the restart (started 2 s after the probe).
	for _, r := range pr.Results {
		if r.Error != "" {
			t.Logf("probe opened at %.0f ms (the restart began at about 2000 ms and took %.0f ms): %s after %.0f ms",
				r.OpenedMS, float64(e.fig.restartTook.Milliseconds()), r.Error, r.WaitedMS)
		}
	}
	if newPID := e.show(t, "soda-mcp@everything.service", "MainPID"); newPID == oldPID || newPID == "0" {
		t.Errorf("MainPID %s -> %s: the service was not restarted", oldPID, newPID)
	}
	if st := e.show(t, "soda-mcp@everything.socket", "ActiveState"); st != "active" {
		t.Errorf("soda-mcp@everything.socket is %s after the restart", st)
	}
}

func (e *env) testStop(t *testing.T) {
	b := e.b
	tok := e.token(t, "everything", portEverything)
	hold := b.start(t, []string{"SODA_TOKEN=" + tok}, "node", e.client(), "hold", portEverything, "echo", `{"message":"before stop"}`)
	if h := parseClient(t, hold.next(t, 30*time.Second, "everything session")); !h.OK {
		t.Fatalf("session before the stop: %+v", h)
	}
	defer hold.finish(t, 10*time.Second)
	child := e.pids(t, "-f", "server-everything/dist/index.js")
	if len(child) == 0 {
		t.Fatalf("no server-everything child runs for the open session")
	}
	cg := e.cgroupOf(t, child[0])
	t.Logf("child %s runs in %s", child[0], cg)

	start := time.Now()
	must(t, b.exec(runOpts{timeout: 60 * time.Second}, "systemctl", "stop", "soda-mcp@everything.socket", "soda-mcp@everything.service"))
	t.Logf("systemctl stop took %s", time.Since(start).Round(time.Millisecond))
	if p := e.pids(t, "-f", "soda-mcpd everything"); len(p) > 0 {
		t.Errorf("soda-mcpd everything still runs: %v", p)
	}
	if p := e.pids(t, "-f", "server-everything/dist/index.js"); len(p) > 0 {
		t.Errorf("server-everything children still run: %v\n%s", p, b.run("ps", "-o", "pid,args", "-p", strings.Join(p, ",")).stdout)
	}
	for _, u := range []string{"soda-mcp@everything.service", "soda-mcp@everything.socket"} {
		if st := e.show(t, u, "ActiveState"); st != "inactive" {
			t.Errorf("%s is %s after stop", u, st)
		}
	}
	if strings.HasSuffix(cg, ".scope") {
		scope := filepath.Base(cg)
		if st := e.show(t, scope, "ActiveState"); st != "inactive" {
			t.Errorf("the child's scope %s is %s after stop", scope, st)
		}
	}
	scopes := must(t, b.run("systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=scope"))
	for _, l := range strings.Split(scopes, "\n") {
		if f := strings.Fields(l); len(f) > 0 && e.show(t, f[0], "Slice") == "soda-mcp.slice" {
			procs := b.run("systemd-cgls", "--no-pager", "-u", f[0]).stdout
			if strings.Contains(procs, "server-everything") {
				t.Errorf("scope %s of server-everything is left: %s", f[0], procs)
			}
		}
	}
}

func (e *env) testVerify(t *testing.T) {
	b := e.b
	files := strings.Fields(must(t, b.sh("ls /usr/lib/systemd/system/soda*")))
	if len(files) == 0 {
		t.Fatal("no /usr/lib/systemd/system/soda* unit installed")
	}
	for _, f := range files {
		arg := f
		base := filepath.Base(f)
		if i := strings.Index(base, "@."); i >= 0 { // a template: verify an instance
			arg = base[:i+1] + "everything" + base[i+1:]
		}
		r := b.run("systemd-analyze", "verify", arg)
		if r.err != nil || strings.TrimSpace(r.stdout+r.stderr) != "" {
			if r.err != nil {
				t.Errorf("systemd-analyze verify %s failed:\n%s", arg, r)
			} else {
				t.Logf("systemd-analyze verify %s: passed with messages:\n%s", arg, r)
			}
		} else {
			t.Logf("systemd-analyze verify %s: clean", arg)
		}
	}
	r := b.run("systemd-analyze", "security", "--no-pager", "soda-mcp@everything.service")
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no exposure level:\n%s", r)
	}
	e.fig.exposure = m[1] + " " + m[2]
	x, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("systemd-analyze security soda-mcp@everything.service: exposure %s %s (target <= 2.5)", m[1], m[2])
	var residual []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "✗") {
			residual = append(residual, strings.TrimSpace(l))
		}
	}
	t.Logf("residual findings (%d):\n%s", len(residual), strings.Join(residual, "\n"))
	if x > 5 {
		t.Errorf("exposure %.1f is above 5 (target <= 2.5)", x)
	} else if x > 2.5 {
		t.Logf("WARNING: exposure %.1f is above the issue's target of 2.5", x)
	}
}

func (e *env) testBenchmark(t *testing.T) {
	b := e.b
	tok := e.token(t, "echo", portEcho)
	r := b.exec(runOpts{timeout: 120 * time.Second, env: []string{"SODA_TOKEN=" + tok}}, "node", e.client(), "bench", portEcho, "11", "soda-mcp@echo.service")
	if r.stdout == "" {
		t.Fatalf("bench: %s", r)
	}
	br := parseClient(t, lastLine(r.stdout))
	if !br.OK {
		t.Fatalf("bench: %+v\n%s", br, r)
	}
	e.fig.benchRuns, e.fig.benchMedian, e.fig.benchMin, e.fig.benchMax = br.Times, br.MedianMS, br.MinMS, br.MaxMS
	t.Logf("connect -> first initialize answered, socket activation from a stopped soda-mcp@echo.service, 11 runs: median %.1f ms (min %.1f, max %.1f; all %v)",
		br.MedianMS, br.MinMS, br.MaxMS, br.Times)
	if br.MedianMS > 100 {
		// Reported, not gated: CI machines are shared and noisy.
		t.Logf("NOTE: median %.1f ms is above the 100 ms target", br.MedianMS)
	}

	// ExitIdleSec=2s: after 3 s without sessions nothing of soda runs.
	e.writeEchoConf(t, "ExitIdleSec=2s\n")
	must(t, b.run("systemctl", "stop", "soda-mcp@echo.service"))
	must(t, b.run("systemctl", "reset-failed", "soda-mcp@echo.service"))
	c := e.callTool(t, tok, portEcho, "echo", `{"text":"then idle"}`)
	if !c.OK {
		t.Fatalf("tools/call echo: %+v", c)
	}
	idleFrom := time.Now() // the client ended its session (DELETE) before exiting
	exited := time.Duration(0)
	for time.Since(idleFrom) < 8*time.Second {
		if e.show(t, "soda-mcp@echo.service", "ActiveState") == "inactive" && len(e.pids(t, "-f", "soda-mcpd echo")) == 0 {
			exited = time.Since(idleFrom)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.fig.exitIdleAfter = exited
	if exited == 0 {
		t.Fatalf("soda-mcpd echo still runs 8 s after its last session ended (ExitIdleSec=2s)")
	}
	t.Logf("ExitIdleSec=2s: soda-mcp@echo.service exited %s after the last session ended", exited.Round(10*time.Millisecond))
	if exited > 3*time.Second {
		t.Errorf("exit after %s, want within 3 s (ExitIdleSec=2s)", exited.Round(10*time.Millisecond))
	}
	if p := e.pids(t, "-x", "mcpecho"); len(p) > 0 {
		t.Errorf("echo children left after the idle exit: %v", p)
	}
	mem := e.show(t, "soda-mcp@echo.service", "MemoryCurrent")
	t.Logf("soda-mcp@echo.service MemoryCurrent=%s, socket %s", mem, e.show(t, "soda-mcp@echo.socket", "ActiveState"))
	if mem != "[not set]" && mem != "0" && mem != "18446744073709551615" {
		t.Errorf("MemoryCurrent of the exited service is %s, want none", mem)
	}
	if st := e.show(t, "soda-mcp@echo.socket", "ActiveState"); st != "active" {
		t.Errorf("soda-mcp@echo.socket is %s after the idle exit, want active", st)
	}
	if c := e.callTool(t, tok, portEcho, "echo", `{"text":"again"}`); !c.OK {
		t.Errorf("the socket did not re-activate the service after the idle exit: %+v", c)
	}
}

// testPackagedSandbox: the package installs the sandbox's init where
// sodactl looks for it (/usr/libexec/soda, root's, not writable by others),
// and the installed sodactl runs a command in a sandbox with it.
func (e *env) testPackagedSandbox(t *testing.T) {
	b := e.b
	if got := strings.TrimSpace(must(t, b.run("stat", "-c", "%a %U:%G", "/usr/libexec/soda/soda-sandbox-init"))); got != "755 root:root" {
		t.Errorf("/usr/libexec/soda/soda-sandbox-init is %s, want 755 root:root", got)
	}
	if r := b.run("/usr/libexec/soda/soda-sandbox-init"); r.code != 2 || !strings.Contains(r.stderr, "not for direct use") {
		t.Errorf("soda-sandbox-init run by hand: exit %d, stderr %q; want 2 and \"not for direct use\"", r.code, r.stderr)
	}
	r := b.exec(runOpts{timeout: 60 * time.Second}, "sh", "-c", "cd / && sodactl run -- sh -c 'echo in-sandbox; cat /proc/1/comm 2>&1 || true'")
	if r.err != nil || !strings.Contains(r.stdout, "in-sandbox") {
		t.Fatalf("the packaged sodactl run:\n%s", r)
	}
	t.Logf("packaged sodactl run: %s", strings.TrimSpace(r.stdout))
}

// testSandboxSliceQuota: the package's generator, run by the system's
// manager and, as a user generator, by a user's, gives soda-sandbox.slice
// the sandboxes' collective CPU quota, the box's CPUs but one (at least
// one); an administrator's drop-in in /etc that sets CPUQuota= wins even
// with a name that sorts before the generated one, and once it is removed
// the generated quota is back. With cgroup hybrid the slice's cgroup holds
// it (cpu.cfs_quota_us) once a unit runs in it.
func (e *env) testSandboxSliceQuota(t *testing.T) {
	b := e.b
	ncpu, err := strconv.Atoi(strings.TrimSpace(must(t, b.run("nproc"))))
	if err != nil {
		t.Fatalf("nproc in the box: %v", err)
	}
	want := fmt.Sprintf("%ds", max(1, ncpu-1))
	slice := func(user string) (quota, dropIns string) {
		t.Helper()
		r := b.run("systemctl", "show", "-p", "CPUQuotaPerSecUSec", "-p", "DropInPaths", "soda-sandbox.slice")
		if user != "" {
			r = b.run("runuser", "-u", user, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+e.uidOf(t, user),
				"systemctl", "--user", "show", "-p", "CPUQuotaPerSecUSec", "-p", "DropInPaths", "soda-sandbox.slice")
		}
		out := must(t, r)
		for l := range strings.SplitSeq(out, "\n") {
			if v, ok := strings.CutPrefix(l, "CPUQuotaPerSecUSec="); ok {
				quota = v
			}
			if v, ok := strings.CutPrefix(l, "DropInPaths="); ok {
				dropIns = v
			}
		}
		return quota, dropIns
	}
	if q, d := slice(""); q != want || !strings.Contains(d, "/run/systemd/generator/soda-sandbox.slice.d/00-soda-cpu-quota.conf") {
		t.Errorf("the system's soda-sandbox.slice: CPUQuotaPerSecUSec=%s, drop-ins %q; want %s from soda-generator's drop-in (%d CPUs)", q, d, want, ncpu)
	}
	must(t, b.sh("id carol >/dev/null 2>&1 || useradd -M -s /bin/sh carol"))
	uid := e.uidOf(t, "carol")
	must(t, b.run("systemctl", "start", "user@"+uid+".service"))
	if q, d := slice("carol"); q != want || !strings.Contains(d, "/run/user/"+uid+"/systemd/generator/soda-sandbox.slice.d/00-soda-cpu-quota.conf") {
		t.Errorf("carol's soda-sandbox.slice: CPUQuotaPerSecUSec=%s, drop-ins %q; want %s from the user generator's drop-in", q, d, want)
	}
	if e.fig.cgroup == "hybrid" {
		must(t, b.run("systemd-run", "--quiet", "--unit", "soda-test-slice", "--slice", "soda-sandbox.slice", "sleep", "60"))
		got := strings.TrimSpace(b.run("cat", "/sys/fs/cgroup/cpu/soda.slice/soda-sandbox.slice/cpu.cfs_quota_us").stdout)
		b.run("systemctl", "stop", "soda-test-slice.service")
		if w := fmt.Sprint(max(1, ncpu-1) * 100000); got != w {
			t.Errorf("soda-sandbox.slice's cgroup: cpu.cfs_quota_us %q, want %s", got, w)
		}
	}
	// The administrator's drop-in wins, whatever its name.
	b.write(t, "/etc/systemd/system/soda-sandbox.slice.d/00-a.conf", "[Slice]\nCPUQuota=150%\n", "0644")
	must(t, b.run("systemctl", "daemon-reload"))
	if q, d := slice(""); q != "1.500000s" || strings.Contains(d, "00-soda-cpu-quota.conf") {
		t.Errorf("with /etc/systemd/system/soda-sandbox.slice.d/00-a.conf (CPUQuota=150%%): CPUQuotaPerSecUSec=%s, drop-ins %q; want 1.500000s and no generated drop-in", q, d)
	}
	must(t, b.run("rm", "-r", "/etc/systemd/system/soda-sandbox.slice.d"))
	must(t, b.run("systemctl", "daemon-reload"))
	if q, _ := slice(""); q != want {
		t.Errorf("after the administrator's drop-in is gone: CPUQuotaPerSecUSec=%s, want %s again", q, want)
	}
	b.run("systemctl", "stop", "user@"+uid+".service")
}

// uidOf is user's uid in the box.
func (e *env) uidOf(t *testing.T, user string) string {
	t.Helper()
	return strings.TrimSpace(must(t, e.b.run("id", "-u", user)))
}

func (e *env) testRemove(t *testing.T) {
	b := e.b
	r := b.exec(runOpts{timeout: 90 * time.Second}, "dpkg", "-r", "soda")
	t.Logf("%s", r)
	if r.err != nil {
		t.Fatalf("dpkg -r soda failed")
	}
	if out := strings.TrimSpace(must(t, b.run("systemctl", "list-units", "--plain", "--no-legend", "soda*"))); out != "" {
		t.Errorf("soda units still loaded and active after removal:\n%s", out)
	}
	if out := strings.TrimSpace(b.run("systemctl", "list-units", "--all", "--plain", "--no-legend", "soda*").stdout); out != "" {
		t.Logf("systemctl list-units --all 'soda*' (inactive leftovers in memory):\n%s", out)
	}
	lf := b.run("systemctl", "list-unit-files", "--plain", "--no-legend", "soda*")
	if lf.err != nil && lf.code != 1 { // 1: no unit file matches
		t.Fatalf("systemctl list-unit-files:\n%s", lf)
	}
	files := strings.TrimSpace(lf.stdout)
	for _, l := range strings.Split(files, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && (f[1] == "enabled" || f[1] == "enabled-runtime" || f[1] == "generated") {
			t.Errorf("unit file left enabled after removal: %s", l)
		}
	}
	if files != "" {
		t.Logf("systemctl list-unit-files 'soda*':\n%s", files)
	}
	if p := e.pids(t, "-f", "soda-mcpd|hog.mjs|mcpecho|server-everything"); len(p) > 0 {
		t.Errorf("soda processes left after removal: %v\n%s", p, b.run("ps", "-o", "pid,args", "-p", strings.Join(p, ",")).stdout)
	}
	if gen := strings.TrimSpace(b.sh("ls -d /run/systemd/generator/soda* /run/systemd/generator/*/soda* 2>/dev/null").stdout); gen != "" {
		t.Errorf("generator output left after removal:\n%s", gen)
	}
}

// writeResults writes test/e2e/results.md (the lead copies it into docs/),
// only after a run of every step.
func (e *env) writeResults(t *testing.T) {
	f := e.fig
	for _, o := range f.subtestOutcomes {
		if strings.HasPrefix(o, "not run") {
			t.Logf("not writing results.md: not every step ran (-run)")
			return
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# soda on a real systemd: end-to-end results\n\n")
	fmt.Fprintf(&s, "Written by `go test ./test/e2e/` (TestSystemd) on %s UTC. Box: test/box/sdbox, cgroup %s, %s, kernel %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), f.cgroup, f.systemd, f.kernel)
	fmt.Fprintf(&s, "## Figures\n\n| what | measured | target |\n|---|---|---|\n")
	if f.benchMedian > 0 {
		fmt.Fprintf(&s, "| connect → first `initialize` answered, socket activation from a stopped service (Go echo fixture), median of %d | **%.1f ms** (min %.1f, max %.1f) | ≤ 100 ms |\n",
			len(f.benchRuns), f.benchMedian, f.benchMin, f.benchMax)
	}
	if f.exitIdleAfter > 0 {
		fmt.Fprintf(&s, "| `ExitIdleSec=2s`: last session ended → no soda-mcpd process, service cgroup gone | **%s** | ≤ 3 s; memory zero |\n", f.exitIdleAfter.Round(10*time.Millisecond))
	}
	if f.exposure != "" {
		fmt.Fprintf(&s, "| `systemd-analyze security soda-mcp@everything.service` | **%s** | ≤ 2.5 |\n", f.exposure)
	}
	if f.restartTook > 0 {
		fmt.Fprintf(&s, "| `systemctl restart` with a 5 s call in flight | %s; %s | call completes, nothing refused |\n", f.restartTook.Round(time.Millisecond), f.restartProbes)
		fmt.Fprintf(&s, "| client opened during that restart | %s | served |\n", f.lateClient)
	}
	for _, r := range []struct{ what, got, want string }{
		{"`kill -9` of soda-mcpd (shipped unit, Restart=on-failure) with 3 sessions of `" + killServer + "`", f.killMain, "nothing left"},
		{"supervisors, then soda-mcpd killed (Restart=no), then a connection", strings.Join(f.killSupervisors, "; "), "nothing left after READY=1"},
		{"`systemctl stop` with 3 such sessions", f.stopSessions, "no supervisor, no scope"},
	} {
		if r.got != "" {
			fmt.Fprintf(&s, "| %s | %s | %s |\n", r.what, r.got, r.want)
		}
	}
	if len(f.benchRuns) > 0 {
		fmt.Fprintf(&s, "\nAll activation runs (ms): %v\n", f.benchRuns)
	}
	fmt.Fprintf(&s, "\n## Checks\n\n")
	for _, o := range f.subtestOutcomes {
		fmt.Fprintf(&s, "- %s\n", o)
	}
	path := filepath.Join(e.repo, "test", "e2e", "results.md")
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Errorf("write %s: %v", path, err)
		return
	}
	t.Logf("wrote %s", path)
}

// testMetricsUnit: a socket-activated soda-mcp@ unit from the package,
// with MetricsTextfile=yes, serves GET /metrics behind its token (401
// without) and writes /run/soda/metrics/soda-mcp@NAME.prom under the
// unit's ProtectSystem=strict, readable by any user (node_exporter's);
// sodactl top --once shows it; the file goes when the unit stops.
func (e *env) testMetricsUnit(t *testing.T) {
	b := e.b
	b.write(t, "/etc/soda/mcp/metered.conf", "[Server]\nExecStart=/usr/local/bin/mcpecho\n\n[Bridge]\nListen=127.0.0.1:"+portMetered+"\nMetricsTextfile=yes\n", "0644")
	must(t, b.run("systemctl", "daemon-reload"))
	must(t, b.run("systemctl", "start", "soda-mcp@metered.socket"))
	defer b.run("systemctl", "stop", "soda-mcp@metered.socket", "soda-mcp@metered.service")
	url := "http://127.0.0.1:" + portMetered
	if code := strings.TrimSpace(b.run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url+"/metrics").stdout); code != "401" {
		t.Errorf("GET /metrics without the token: %s, want 401", code)
	}
	tok := strings.TrimSpace(b.run("sodactl", "mcp", "token", "metered").stdout)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
	r := b.sh("curl -s -D - -o /dev/null -H 'Authorization: Bearer " + tok + "' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '" + init + "' " + url + "/mcp")
	if !strings.Contains(r.stdout, "200") {
		t.Fatalf("initialize through soda-mcp@metered: %s", r)
	}
	r = b.sh("curl -s -H 'Authorization: Bearer " + tok + "' " + url + "/metrics")
	for _, want := range []string{`soda_mcp_sessions_opened_total{server="metered"} 1`, `soda_mcp_calls_total{class="initialize",server="metered"} 1`, `soda_http_refused_total{reason="auth",server="metered"} 1`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("GET /metrics lacks %q:\n%s", want, r.stdout)
		}
	}
	const file = "/run/soda/metrics/soda-mcp@metered.prom"
	deadline := time.Now().Add(10 * time.Second)
	for b.sh("grep -q 'soda_mcp_sessions_opened_total{server=\"metered\"} 1' "+file).err != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s not written with the session:\n%s\n%s", file, b.run("ls", "-la", "/run/soda/metrics").stdout,
				b.run("journalctl", "-u", "soda-mcp@metered", "--no-pager", "-n", "20").stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := b.run("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat", file); r.err != nil {
		t.Errorf("the textfile is not readable by another user (node_exporter's): %s", r)
	}
	if r := b.run("sodactl", "top", "--once", "--interval", "300ms"); r.err != nil || !regexp.MustCompile(`(?m)^metered +\d+ +\d+ `).MatchString(r.stdout) {
		t.Errorf("sodactl top --once: no row for metered:\n%s", r)
	}
	must(t, b.run("systemctl", "stop", "soda-mcp@metered.socket", "soda-mcp@metered.service"))
	if b.run("test", "-e", file).err == nil {
		t.Errorf("%s left after the unit stopped", file)
	}
}
