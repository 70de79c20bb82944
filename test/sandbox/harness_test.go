// Package sandboxtest runs sodactl run against a real systemd, the real
// kernel sandbox and real MCP servers: the escape battery (test/sbxprobe)
// as root and as an ordinary user, egress through the relay and proxy, an
// agent-shaped MCP workload, resource limits and fail-closed refusals, and
// what a sandbox costs the host: its responsiveness under a fork bomb and a
// CPU burner (TestHostResponsive, which also runs sodactl on this host
// itself, outside the box) and the memory of its private tmpfs.
//
// It needs root and boots a throw-away systemd 252 (test/box/sdbox, cgroup
// hybrid, so MemoryMax/TasksMax/CPUQuota are enforced); run it with
// "make test-e2e" (SODA_E2E=1). Inside the box, nothing leaves loopback:
// names used by the tests are resolved from the box's /etc/hosts.
package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// Fixed loopback ports inside the box.
const (
	mcpPort   = 18111 // soda-mcpd bridging server-everything
	echoPort  = 18222 // granted (--allow-private) echo target
	hostPort  = 18333 // a host service nothing grants
	anyPort   = 18446 // a host service on 0.0.0.0, reached through hostaddr.test (18444 is TestClaudeCode's)
	testUID   = 1001
	testUser  = "tester"
	boxCgroup = "hybrid"
)

// env is the test environment shared by every test of the package.
type env struct {
	repo    string // module root
	bin     string // built binaries and fixtures, bound into the box
	box     string // sdbox DIR
	sdbox   string
	skipMsg string
	hostPID string // pid of listeners.py in the box
	// What names the box (the sandbox's host): its machine-id, boot id,
	// SHA-256 of its kernel command line, its MAC addresses.
	hostMachineID, hostBootID, hostCmdlineSHA, hostMACs string
}

var theEnv env

func TestMain(m *testing.M) {
	code := func() int {
		if os.Getenv("SODA_E2E") != "1" {
			theEnv.skipMsg = "SKIP: sandbox end-to-end tests need root and a systemd box; run them with make test-e2e (SODA_E2E=1)"
			return m.Run()
		}
		if os.Geteuid() != 0 {
			theEnv.skipMsg = "SKIP: needs root (boots systemd in a box)"
			return m.Run()
		}
		if err := theEnv.setup(); err != nil {
			fmt.Fprintf(os.Stderr, "sandbox e2e setup: %v\n", err)
			theEnv.teardown()
			return 1
		}
		defer theEnv.teardown()
		return m.Run()
	}()
	os.Exit(code)
}

func requireEnv(t *testing.T) *env {
	t.Helper()
	if theEnv.skipMsg != "" {
		t.Skip(theEnv.skipMsg)
	}
	return &theEnv
}

func (e *env) setup() error {
	_, file, _, _ := runtime.Caller(0)
	e.repo = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	e.sdbox = filepath.Join(e.repo, "test", "box", "sdbox")
	var err error
	// Not under /tmp or /var/tmp: the box and the sandbox have their own.
	// On the host's disk (bound into the box), where idmapped mounts work,
	// unlike on the box's overlay.
	if e.bin, err = os.MkdirTemp("/var/lib", "soda-sbx-e2e-"); err != nil {
		return err
	}
	if err := os.Chmod(e.bin, 0o755); err != nil {
		return err
	}
	if err := testkit.Build(e.bin, "cmd/sodactl", "cmd/soda-sandbox-init", "cmd/soda-mcpd", "cmd/sodad", "cmd/soda-generator", "test/sbxprobe", "test/sbxconc", "test/sbxegress"); err != nil {
		return err
	}
	// The MCP server the sandbox is granted.
	everything := filepath.Join(e.repo, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(everything); err != nil {
		return fmt.Errorf("server-everything missing (make deps-test): %w", err)
	}
	// Audit files of both users' runs.
	if err := os.Mkdir(filepath.Join(e.bin, "audit"), 0o777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(e.bin, "audit"), 0o1777); err != nil {
		return err
	}
	cfgDir := filepath.Join(e.bin, "mcp")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf("[Server]\nExecStart=node %s stdio\n\n[Bridge]\nListen=127.0.0.1:%d\nTokenFile=%s/everything.token\n", everything, mcpPort, cfgDir)
	if err := os.WriteFile(filepath.Join(cfgDir, "everything.conf"), []byte(conf), 0o644); err != nil {
		return err
	}

	if e.box, err = os.MkdirTemp("/var/tmp", "soda-sbx-box-"); err != nil {
		return err
	}
	up := exec.Command(e.sdbox, "up", "--cgroup", boxCgroup, "--bind", e.bin, "--bind-ro", e.repo, e.box)
	if out, err := up.CombinedOutput(); err != nil {
		return fmt.Errorf("sdbox up: %v\n%s", err, out)
	}
	listeners := fmt.Sprintf("python3 %s/test/sandbox/listeners.py --echo %d --tcp %d --any %d --unix /run/soda-test/docker.sock --unix /tmp/.X11-unix/X77 --unix /root/.ssh/agent.sock --unix /home/%s/.ssh/agent.sock --abstract soda-test-abstract",
		e.repo, echoPort, hostPort, anyPort, testUser)
	script := strings.Join([]string{
		"set -e",
		// soda's slices and its generator where the package puts them, for
		// the system manager and users' (nfpm.yaml): the generator gives
		// soda-sandbox.slice the sandboxes' collective CPU quota.
		fmt.Sprintf("install -m 0644 %[1]s/units/soda.slice %[1]s/units/soda-sandbox.slice /usr/lib/systemd/system/", e.repo),
		fmt.Sprintf("install -D -m 0644 %s/units/soda-sandbox.slice /usr/lib/systemd/user/soda-sandbox.slice", e.repo),
		fmt.Sprintf("install -D -m 0755 %s/soda-generator /usr/lib/systemd/system-generators/soda-generator", e.bin),
		"mkdir -p /usr/lib/systemd/user-generators && ln -sf ../system-generators/soda-generator /usr/lib/systemd/user-generators/soda-generator",
		"systemctl daemon-reload",
		// The user may grant the configured server as members of group
		// soda may: its token is 0640 root:soda (soda-mcpd refuses a
		// token file others can read).
		"groupadd -f soda",
		fmt.Sprintf("useradd -m -u %d -G soda %s", testUID, testUser),
		// A public address of the box's own (as a host with a public
		// address has), which hostaddr.test resolves to.
		"ip addr add 1.2.3.4/32 dev lo",
		// A network device of the box's own (its network namespace has
		// only lo otherwise), which the sandbox must not see.
		"ip link add soda-test0 type veth peer name soda-test1",
		// A test resolver: the names below resolve from /etc/hosts only.
		"printf '%s\\n' '1.2.3.4 hostaddr.test' '127.0.0.1 loop.test' '10.0.0.1 evil.test' '169.254.169.254 meta.test' '::ffff:127.0.0.1 v6map.test' '100.64.1.1 cgnat.test' '93.184.216.34 public.test' >> /etc/hosts",
		fmt.Sprintf("systemd-run --quiet --unit soda-test-listeners -p StandardError=journal %s", listeners),
		fmt.Sprintf("systemd-run --quiet --unit soda-test-mcpd %s/soda-mcpd --config-dir %s everything", e.bin, cfgDir),
		fmt.Sprintf("systemctl start user@%d.service", testUID),
		// An unprivileged fresh /proc needs a fully visible /proc, which
		// the box's read-only overmounts (its own safety) prevent.
		"for m in /proc/sys /proc/irq /proc/bus /proc/fs /proc/acpi; do umount -l $m 2>/dev/null || true; done",
		fmt.Sprintf("for i in $(seq 100); do [ -s %s/everything.token ] && break; sleep 0.1; done; chgrp soda %s/everything.token && chmod 0640 %s/everything.token", cfgDir, cfgDir, cfgDir),
		fmt.Sprintf("for i in $(seq 100); do ss -ltn | grep -q :%d && ss -ltn | grep -q :%d && break; sleep 0.1; done", echoPort, mcpPort),
		"systemctl show -p MainPID --value soda-test-listeners",
	}, "\n")
	r := e.exec(execOpts{}, "sh", "-c", script)
	if r.err != nil {
		return fmt.Errorf("box setup: %v\n%s", r.err, r)
	}
	e.hostPID = strings.TrimSpace(r.stdout)
	r = e.exec(execOpts{}, "sh", "-c", "cat /etc/machine-id /proc/sys/kernel/random/boot_id; sha256sum /proc/cmdline | cut -d' ' -f1; "+
		"cat /sys/class/net/*/address | grep -v '^00:00:00:00:00:00$' | sort -u | paste -sd, -")
	ids := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.err != nil || len(ids) < 3 {
		return fmt.Errorf("read the box's identity: %v\n%s", r.err, r)
	}
	e.hostMachineID, e.hostBootID, e.hostCmdlineSHA = ids[0], ids[1], ids[2]
	macs := []string{}
	if len(ids) > 3 && ids[3] != "" {
		macs = strings.Split(ids[3], ",")
	}
	// And the real host's, outside the box.
	if files, _ := filepath.Glob("/sys/class/net/*/address"); len(files) > 0 {
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) != "00:00:00:00:00:00" {
				macs = append(macs, strings.TrimSpace(string(b)))
			}
		}
	}
	e.hostMACs = strings.Join(macs, ",")
	return nil
}

func (e *env) teardown() {
	if e.box != "" {
		_ = exec.Command(e.sdbox, "down", e.box).Run()
		os.RemoveAll(e.box)
	}
	if e.bin != "" {
		os.RemoveAll(e.bin)
	}
}

type execOpts struct {
	user    string // "" = root
	env     []string
	timeout time.Duration
	stdin   string
}

type result struct {
	args           []string
	stdout, stderr string
	code           int
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("$ %s\nexit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// exec runs args in the box as root or as o.user.
func (e *env) exec(o execOpts, args ...string) result {
	if o.timeout == 0 {
		o.timeout = 90 * time.Second
	}
	inner := append([]string{"env"}, o.env...)
	if o.user != "" {
		inner = append([]string{"runuser", "-u", o.user, "--", "env",
			fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", testUID),
			fmt.Sprintf("DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/%d/bus", testUID)}, o.env...)
	}
	full := append(append([]string{"exec", e.box, "--"}, inner...), args...)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.sdbox, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(o.stdin)
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String(), err: err}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	}
	return r
}

// sodactl runs "sodactl run ARGS" in the box.
func (e *env) sodactl(o execOpts, args ...string) result {
	full := append([]string{filepath.Join(e.bin, "sodactl"), "run", "--config-dir", filepath.Join(e.bin, "mcp")}, args...)
	return e.exec(o, full...)
}

// probe is the path of sbxprobe (readable by every uid in the sandbox).
func (e *env) probe() string { return filepath.Join(e.bin, "sbxprobe") }

// auditRecords reads an audit file (JSON lines) written in the box.
func (e *env) auditRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	r := e.exec(execOpts{}, "cat", path)
	if r.err != nil {
		t.Fatalf("read audit: %s", r)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// egressEvents returns the egress events of an audit trail.
func egressEvents(recs []map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if ev, ok := r["egress"].(map[string]any); ok {
			out = append(out, ev)
		}
	}
	return out
}

// noLeftovers checks that no sandbox scope, process or home is left.
func (e *env) noLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.exec(execOpts{}, "sh", "-c", "systemctl list-units --all --plain --no-legend 'soda-sandbox-*' | grep -v '^$' || true; "+
			"ps -eo uid=,comm= | awk '$1>=2147000000' ; ls /run/soda/sandbox /run/user/1001/soda-sandbox-1001 2>/dev/null | grep -v '^uids$' | grep -v '^/' | grep -v '^$' || true")
		if strings.TrimSpace(r.stdout) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind after the sandbox ended:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
