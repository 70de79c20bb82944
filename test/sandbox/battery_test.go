package sandboxtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// probeResult is one row of sbxprobe battery's output.
type probeResult struct {
	Row     int    `json:"row"`
	Name    string `json:"name"`
	Blocked bool   `json:"blocked"`
	Errno   string `json:"errno"`
	Detail  string `json:"detail"`
	Info    bool   `json:"info"`
	Skipped bool   `json:"skipped"`
}

// Targets of the egress rows: granted names that resolve (box /etc/hosts)
// to addresses the proxy must refuse, names and ports not granted, and
// IP literals in odd forms.
var (
	grantedButUnsafe = []string{"loop.test:18222", "evil.test:443", "meta.test:80", "v6map.test:18222", "cgnat.test:443",
		"hostaddr.test:18446"} // a public address that is the host's own
	deniedTargets = append([]string{
		"example.com:443",    // not granted: refused before any DNS lookup
		"public.test:22",     // granted for 443 only
		"127.0.0.1:18333",    // a host service nothing grants
		"127.1:18222",        // odd IPv4 literals
		"2130706433:18222",   //
		"0x7f000001:18222",   //
		"[::1]:18222",        // IPv6 literal (brackets refused)
		"localhost:18222",    // not granted
		"169.254.169.254:80", // metadata literal, not granted
	}, grantedButUnsafe...)
)

// batteryArgs is the sodactl run command line of the battery, for user
// ("" = root).
func (e *env) batteryArgs(user, audit, ws string) []string {
	home := "/root"
	if user != "" {
		home = "/home/" + user
	}
	args := []string{"--audit-json", audit, "--rw", ws,
		"--allow-private", fmt.Sprintf("127.0.0.1:%d", echoPort),
		"--allow", "public.test:443", "--mcp", "everything"}
	for _, g := range grantedButUnsafe {
		args = append(args, "--allow", g)
	}
	args = append(args, "--env", "SODA_TEST_SECRET=hunter2", "--env", "LD_PRELOAD=/tmp/evil.so")
	args = append(args, "--", e.probe(), "battery",
		"--unix", strings.Join([]string{"/run/dbus/system_bus_socket", "/run/systemd/private", "/run/soda-test/docker.sock",
			"/tmp/.X11-unix/X77", home + "/.ssh/agent.sock", "/run/systemd/journal/stdout"}, ","),
		"--abstract", "soda-test-abstract",
		"--host-pid", e.hostPID,
		"--host-tcp", fmt.Sprint(hostPort),
		"--deny-connect", strings.Join(deniedTargets, ","),
		"--allow-connect", fmt.Sprintf("127.0.0.1:%d", echoPort),
		"--workspace", ws,
		"--host-home", home,
		"--plant", strings.Join([]string{home + "/.bashrc-planted", "/etc/cron.d/soda-planted", "/var/tmp/soda-planted",
			"/dev/shm/soda-planted", "/tmp/soda-planted", ws + "/../soda-planted-outside", "/usr/local/bin/soda-planted"}, ","),
		"--secret-env", "SODA_TEST_SECRET,LD_PRELOAD,SODA_MCP_TOKEN_LEAK",
		"--host-machine-id", e.hostMachineID,
		"--host-boot-id", e.hostBootID,
		"--host-cmdline-sha256", e.hostCmdlineSHA,
	)
	if e.hostMACs != "" {
		args = append(args, "--host-macs", e.hostMACs)
	}
	return args
}

func TestBatteryRoot(t *testing.T) { runBattery(t, "") }

func TestBatteryUser(t *testing.T) { runBattery(t, testUser) }

func runBattery(t *testing.T, user string) {
	e := requireEnv(t)
	who := "root"
	if user != "" {
		who = user
	}
	ws := e.bin + "/ws-battery-" + who
	audit := e.bin + "/audit/audit-battery-" + who + ".json"
	setup := fmt.Sprintf("rm -rf %[1]s %[2]s && mkdir -p %[1]s && chown %[3]s %[1]s", ws, audit, who)
	if r := e.exec(execOpts{}, "sh", "-c", setup); r.err != nil {
		t.Fatal(r)
	}
	args := e.batteryArgs(user, audit, ws)
	if user != "" {
		// On this cgroup v1/v2 hybrid host the user's systemd cannot
		// delegate the v1 memory/pids controllers: the sandbox refuses
		// (TestUserRefusesUnenforcedLimits); the rest of the battery runs
		// with the cgroup layer explicitly waived.
		args = append([]string{"--allow-degraded", "cgroup"}, args...)
	}
	r := e.sodactl(execOpts{user: user, env: []string{"LD_PRELOAD=", "SODA_MCP_TOKEN_LEAK=x"}}, args...)
	if r.err != nil {
		t.Fatalf("battery did not run: %s", r)
	}
	var out struct {
		Results []probeResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("battery output: %v\n%s", err, r)
	}
	if len(out.Results) < 60 {
		t.Fatalf("only %d probes ran:\n%s", len(out.Results), r.stdout)
	}
	var blocked, info, escaped int
	for _, p := range out.Results {
		switch {
		case p.Skipped:
			t.Errorf("row %d %s skipped: %s (every input is given; nothing may be skipped)", p.Row, p.Name, p.Detail)
		case p.Name == "allowed-connect":
			if p.Blocked {
				t.Errorf("positive control failed: the granted echo target was not reachable: %s", p.Detail)
			}
		case p.Info:
			info++
			t.Logf("info   row %2d %-40s %s", p.Row, p.Name, p.Detail)
		case !p.Blocked:
			escaped++
			t.Errorf("ESCAPE row %d %s: %s %s", p.Row, p.Name, p.Errno, p.Detail)
		default:
			blocked++
		}
	}
	t.Logf("%s: %d probes blocked, %d informational, %d escaped", who, blocked, info, escaped)

	// Nothing planted reached the host.
	home := "/root"
	if user != "" {
		home = "/home/" + user
	}
	check := fmt.Sprintf("ls -d %s/.bashrc-planted /etc/cron.d/soda-planted /var/tmp/soda-planted /dev/shm/soda-planted /tmp/soda-planted %s/../soda-planted-outside /usr/local/bin/soda-planted 2>/dev/null || true", home, ws)
	if r := e.exec(execOpts{}, "sh", "-c", check); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("files planted by the sandbox exist on the host:\n%s", r.stdout)
	}
	// The host's listeners saw no connection except the granted echo.
	if r := e.exec(execOpts{}, "sh", "-c", "journalctl -q -u soda-test-listeners -o cat | grep HIT | grep -v 'tcp:18222' || true"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("a host listener was reached from the sandbox:\n%s", r.stdout)
	}

	// Every egress attempt is audited, with the right decision.
	recs := e.auditRecords(t, audit)
	ev := egressEvents(recs)
	decision := map[string]string{}
	reason := map[string]string{}
	for _, x := range ev {
		target, _ := x["target"].(string)
		decision[target], _ = x["decision"].(string)
		reason[target], _ = x["reason"].(string)
	}
	for _, d := range deniedTargets {
		if strings.HasPrefix(d, "[") || strings.HasPrefix(d, "0x") || strings.HasPrefix(d, "2130706433") || strings.HasPrefix(d, "127.1:") {
			continue // malformed targets are audited under their raw text, checked below
		}
		if decision[d] != "deny" {
			t.Errorf("CONNECT %s: audit decision %q (reason %q), want deny", d, decision[d], reason[d])
		}
	}
	if !strings.Contains(reason["example.com:443"], "allow") {
		t.Errorf("example.com:443 refused for %q, want the allow-list (no DNS lookup)", reason["example.com:443"])
	}
	if !strings.Contains(reason["meta.test:80"], "169.254.169.254") {
		t.Errorf("meta.test:80 refused for %q, want the resolved metadata address named", reason["meta.test:80"])
	}
	if !strings.Contains(reason["hostaddr.test:18446"], "1.2.3.4 is this host's own") {
		t.Errorf("hostaddr.test:18446 refused for %q, want the host's own address named", reason["hostaddr.test:18446"])
	}
	if decision[fmt.Sprintf("127.0.0.1:%d", echoPort)] != "allow" {
		t.Errorf("granted echo target not audited as allowed: %v", decision)
	}
	dns := 0
	for _, x := range ev {
		if x["kind"] == "dns" {
			dns++
		}
	}
	if dns == 0 {
		t.Errorf("no DNS attempt audited (the battery resolves secret-token.exfil.example)")
	}
	// The same trail is in the journal, one entry per attempt.
	id, _ := recs[0]["sandbox"].(string)
	jr := e.exec(execOpts{}, "sh", "-c", "journalctl --sync; journalctl -q -o cat SODA_SANDBOX="+id+" MESSAGE_ID=4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c44 | wc -l")
	if n, _ := strconv.Atoi(strings.TrimSpace(jr.stdout)); n != len(ev) {
		t.Errorf("journal has %d egress entries for %s, the audit file %d: %s", n, id, len(ev), jr)
	}
	// The two copies number their records alike: the same sequence
	// numbers, for the same events.
	fileSeq := map[string]string{}
	for _, rec := range recs {
		if x, ok := rec["egress"].(map[string]any); ok {
			fileSeq[fmt.Sprint(rec["seq"])], _ = x["target"].(string)
		}
	}
	jr = e.exec(execOpts{}, "sh", "-c", "journalctl -q -o json --output-fields=SODA_SEQ,SODA_TARGET SODA_SANDBOX="+id+" MESSAGE_ID=4f7c2a6e9d3b4f0a8c1e5b7d2a9f6c44")
	journalSeq := 0
	for _, line := range strings.Split(strings.TrimSpace(jr.stdout), "\n") {
		var j map[string]any
		if json.Unmarshal([]byte(line), &j) != nil {
			continue
		}
		journalSeq++
		seq, _ := j["SODA_SEQ"].(string)
		target, ok := fileSeq[seq]
		if !ok || target != j["SODA_TARGET"] {
			t.Errorf("journal egress entry seq %q target %v: the audit file has %q (present %v)", seq, j["SODA_TARGET"], target, ok)
		}
	}
	if journalSeq != len(fileSeq) {
		t.Errorf("journal has %d numbered egress entries, the audit file %d", journalSeq, len(fileSeq))
	}
	e.noLeftovers(t)
}
