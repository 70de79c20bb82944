package sandboxtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressAtRunTime: a supervisor (test/sbxegress, the engine as a
// library, root, a systemd scope) grants a live sandbox a target and then
// revokes it: the command's CONNECT to the box's echo service is refused
// before, allowed after the grant, refused after the revoke, and both
// changes are on the audit trail with who asked.
func TestEgressAtRunTime(t *testing.T) {
	e := requireEnv(t)
	r := e.exec(execOpts{}, filepath.Join(e.bin, "sbxegress"), fmt.Sprint(echoPort))
	if r.err != nil {
		t.Fatalf("sbxegress: %s", r)
	}
	target := fmt.Sprintf("127.0.0.1:%d", echoPort)
	for _, want := range []string{
		"before=HTTP/1.1 403 ", "granted=HTTP/1.1 200 ", "revoked=HTTP/1.1 403 ",
		"audit grant by=sbxegress grants=" + target + " (private allowed)\n",
		"audit revoke by=sbxegress grants=" + target + " (private allowed)\n",
		"exit=0\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r)
		}
	}
	// An attempt's record is made when it ends, which may be after the
	// next change: count them rather than order them with the changes.
	if n := strings.Count(r.stdout, "egress deny not in allow list\n"); n != 2 {
		t.Errorf("%d denied attempts audited, want 2:\n%s", n, r)
	}
	if n := strings.Count(r.stdout, "egress allow \n"); n != 1 {
		t.Errorf("%d allowed attempts audited, want 1:\n%s", n, r)
	}
	if strings.Index(r.stdout, "audit grant") > strings.Index(r.stdout, "audit revoke") {
		t.Errorf("the revoke is audited before the grant:\n%s", r)
	}
	e.noLeftovers(t)
}

// TestNoNetworkMode: sodactl run --no-network leaves only lo in the netns
// with no socket listening (ss and /proc/net agree), 127.0.0.1:18080
// refuses, no proxy variable is set, and the audit's netns record says
// so; the same probe without the flag (the control) sees the relay.
func TestNoNetworkMode(t *testing.T) {
	e := requireEnv(t)
	probe := `ss -Hltnu | sed 's/^/ss /'
for f in tcp tcp6 udp udp6; do sed 1d /proc/net/$f | awk -v f=$f '{print f, $4}'; done
echo "links: $(ls /sys/class/net | tr '\n' ' ')"
env | grep -i '_proxy=' || true
if (exec 3<>/dev/tcp/127.0.0.1/18080) 2>/dev/null; then echo "connect: ok"; else echo "connect: refused"; fi`
	for _, user := range []string{"", testUser} {
		name := "root"
		if user != "" {
			name = "user"
		}
		t.Run(name, func(t *testing.T) {
			var pre []string
			if user != "" {
				// The user's systemd here cannot delegate the v1
				// controllers (see TestBattery): the cgroup is waived.
				pre = []string{"--allow-degraded", "cgroup"}
			}
			control := e.sodactl(execOpts{user: user}, append(pre, "--", "bash", "-c", probe)...)
			if control.code != 0 || !strings.Contains(control.stdout, "ss ") || !strings.Contains(control.stdout, "tcp 0A") || !strings.Contains(control.stdout, "connect: ok") {
				t.Fatalf("control: the probe does not see the relay without --no-network:\n%s", control)
			}
			audit := filepath.Join(e.bin, "audit", "nonet-"+name+".jsonl")
			r := e.sodactl(execOpts{user: user}, append(pre, "--no-network", "--audit-json", audit, "--", "bash", "-c", probe)...)
			if r.code != 0 {
				t.Fatalf("sodactl run --no-network: %s", r)
			}
			for _, line := range strings.Split(r.stdout, "\n") {
				if strings.HasPrefix(line, "ss ") || strings.HasPrefix(line, "tcp 0A") || strings.HasPrefix(line, "tcp6 0A") || strings.HasPrefix(line, "udp") {
					t.Errorf("listening in the netns: %q", line)
				}
			}
			for _, want := range []string{"links: lo \n", "connect: refused\n"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, r)
				}
			}
			if strings.Contains(strings.ToLower(r.stdout), "_proxy=") {
				t.Errorf("proxy variables set:\n%s", r)
			}
			found := false
			for _, rec := range e.auditRecords(t, audit) {
				if rec["layer"] == "netns" && strings.Contains(fmt.Sprint(rec["detail"]), "no network") {
					found = true
				}
				if rec["event"] == "egress" {
					t.Errorf("an egress record in closed mode: %v", rec)
				}
			}
			if !found {
				t.Errorf("no netns record saying the network is closed in %s", audit)
			}
			e.noLeftovers(t)
		})
	}
}
