// Package hostbattery runs soda's escape battery (test/sbxprobe) through
// the real "sodactl run" on this host, outside the systemd box of
// test/sandbox, as root and as the unprivileged user nobody, and fails on
// any escaped row.
//
// This host may have no systemd and a cgroup v1/v2 hybrid. There the root
// run gets its limits from cgroup v1 directories and runs with every layer
// in place; the user's run, which nothing delegates a cgroup to, waives
// the cgroup layer alone (--allow-degraded cgroup). The box (make
// test-e2e) runs the same battery with the cgroup layer enforced for both.
//
// It needs root (to run the user's sandbox as nobody) and, for the user
// run, unprivileged user namespaces; it skips, saying why, without them.
package hostbattery

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
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

// judge counts the battery's rows as test/sandbox's runBattery does: a
// skipped row is an error (every input is given), the granted echo target
// must be reachable, informational rows are logged, any other row not
// blocked is an escape.
func judge(t *testing.T, who string, rows []probeResult) (blocked, info, escaped int) {
	t.Helper()
	for _, p := range rows {
		switch {
		case p.Skipped:
			t.Errorf("%s: row %d %s skipped: %s (every input is given; nothing may be skipped)", who, p.Row, p.Name, p.Detail)
		case p.Name == "allowed-connect":
			if p.Blocked {
				t.Errorf("%s: positive control failed: the granted echo target was not reachable: %s", who, p.Detail)
			}
		case p.Info:
			info++
			t.Logf("%s: info   row %2d %-40s %s", who, p.Row, p.Name, p.Detail)
		case !p.Blocked:
			escaped++
			t.Errorf("%s: ESCAPE row %d %s: %s %s", who, p.Row, p.Name, p.Errno, p.Detail)
		default:
			blocked++
		}
	}
	return blocked, info, escaped
}

// hostID is what names this host: the sandbox must see none of it.
type hostID struct {
	machineID, bootID, cmdlineSHA string
	macs                          []string
}

func readHostID(t *testing.T) hostID {
	t.Helper()
	var id hostID
	for _, f := range []struct {
		path string
		dst  *string
	}{{"/etc/machine-id", &id.machineID}, {"/proc/sys/kernel/random/boot_id", &id.bootID}} {
		b, err := os.ReadFile(f.path)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			t.Fatalf("read this host's %s: %v", f.path, err)
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatalf("read this host's /proc/cmdline: %v", err)
	}
	sum := sha256.Sum256(b)
	id.cmdlineSHA = hex.EncodeToString(sum[:])
	files, _ := filepath.Glob("/sys/class/net/*/address")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if mac := strings.TrimSpace(string(b)); err == nil && mac != "" && mac != "00:00:00:00:00:00" && !slices.Contains(id.macs, mac) {
			id.macs = append(id.macs, mac)
		}
	}
	return id
}

// listener accepts connections and counts them; the echo listener answers
// each line with itself (the battery's allowed-connect sends "ping").
type listener struct {
	ln   net.Listener
	echo bool
	mu   sync.Mutex
	hits int
}

func listen(t *testing.T, network, addr string, echo bool) *listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	l := &listener{ln: ln, echo: echo}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.hits++
			l.mu.Unlock()
			go func() {
				defer c.Close()
				if l.echo {
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					_, _ = io.Copy(c, c)
				}
			}()
		}
	}()
	return l
}

func (l *listener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hits
}

func (l *listener) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hits = 0
}

// env is what both runs share: the binaries and this host's listeners.
type env struct {
	base     string // under /var/tmp: the sandbox's /tmp is its own
	bin      string // sodactl and sbxprobe, granted read-only
	id       hostID
	hostTCP  *listener // 127.0.0.1: nothing grants it
	echo     *listener // 127.0.0.1: granted with --allow-private
	unixSock *listener // a pathname socket anyone may connect to
	abstract *listener // an abstract socket in the host's network namespace
	sockPath string
	absName  string // without "@"
	tag      string // unique to this test run
}

func setup(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("host lacks: needs root (runs the battery as root and, through setuid to nobody, as an ordinary user)")
	}
	e := &env{id: readHostID(t)}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	e.tag = hex.EncodeToString(rnd[:])
	var err error
	// Not t.TempDir (under /tmp): the sandbox has a private /tmp, so the
	// binaries live where they can be granted. /var/tmp is hidden in the
	// sandbox too, except for what is granted.
	if e.base, err = os.MkdirTemp("/var/tmp", "soda-hostbat-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(e.base) })
	if err := os.Chmod(e.base, 0o755); err != nil {
		t.Fatal(err)
	}
	e.bin = filepath.Join(e.base, "bin")
	if err := os.Mkdir(e.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Build(e.bin, "cmd/sodactl", "cmd/soda-sandbox-init", "test/sbxprobe"); err != nil {
		t.Fatal(err)
	}

	e.hostTCP = listen(t, "tcp", "127.0.0.1:0", false)
	e.echo = listen(t, "tcp", "127.0.0.1:0", true)
	sockDir := filepath.Join(e.base, "sock")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.sockPath = filepath.Join(sockDir, "host.sock")
	e.unixSock = listen(t, "unix", e.sockPath, false)
	if err := os.Chmod(e.sockPath, 0o777); err != nil { // nobody may connect, outside the sandbox
		t.Fatal(err)
	}
	e.absName = "soda-hostbat-" + e.tag
	e.abstract = listen(t, "unix", "@"+e.absName, false)

	// Control: each host listener is reachable from outside the sandbox,
	// so a count of zero afterwards means the sandbox stopped it.
	for _, c := range []struct {
		network, addr string
		l             *listener
	}{
		{"tcp", e.hostTCP.ln.Addr().String(), e.hostTCP},
		{"unix", e.sockPath, e.unixSock},
		{"unix", "@" + e.absName, e.abstract},
	} {
		conn, err := net.DialTimeout(c.network, c.addr, 2*time.Second)
		if err != nil {
			t.Fatalf("control: host listener %s %s not reachable from the host: %v", c.network, c.addr, err)
		}
		conn.Close()
		deadline := time.Now().Add(2 * time.Second)
		for c.l.count() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c.l.count() == 0 {
			t.Fatalf("control: host listener %s %s did not count a connection", c.network, c.addr)
		}
		c.l.reset()
	}
	return e
}

// account is who runs sodactl.
type account struct {
	name     string
	uid, gid uint32
	home     string // its home on the host, which the sandbox must hide
	runtime  string // XDG_RUNTIME_DIR ("" for root)
}

func (a account) root() bool { return a.uid == 0 }

// credential runs a child as a (nil for root).
func (a account) credential() *syscall.SysProcAttr {
	if a.root() {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}}
}

// nobody returns the unprivileged account, with a home and runtime
// directory of its own under base, or skips when it cannot run a sandbox.
func (e *env) nobody(t *testing.T) account {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("host lacks: no user nobody to run the unprivileged sandbox as: %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	a := account{name: "nobody", uid: uint32(uid), gid: uint32(gid),
		home: filepath.Join(e.base, "home-nobody"), runtime: filepath.Join(e.base, "run-nobody")}
	for _, d := range []string{a.home, a.runtime} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(a.uid), int(a.gid)); err != nil {
			t.Fatal(err)
		}
	}
	// Something in the home that nobody can read outside the sandbox.
	if err := os.WriteFile(filepath.Join(a.home, "secret"), []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(a.home, "secret"), int(a.uid), int(a.gid)); err != nil {
		t.Fatal(err)
	}
	// Control: an unprivileged sandbox needs user namespaces.
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("host lacks: no unshare(1) to check for unprivileged user namespaces: %v", err)
	}
	cmd := exec.Command(unshare, "--user", "--map-root-user", "true")
	cmd.SysProcAttr = a.credential()
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("host lacks: unprivileged user namespaces unavailable on this host (unshare --user as nobody: %v %s)", err, bytes.TrimSpace(out))
	}
	return a
}

func TestHostBatteryRoot(t *testing.T) {
	e := setup(t)
	e.run(t, account{name: "root", home: "/root"})
}

func TestHostBatteryUser(t *testing.T) {
	e := setup(t)
	e.run(t, e.nobody(t))
}

// TestHostUserWithoutCgroupRefuses: on a host that delegates no cgroup to
// an ordinary user (a v1/v2 hybrid without systemd), "sodactl run" as that
// user refuses without --allow-degraded cgroup, naming the layer, and
// runs nothing; the cgroup v1 placement is root's only.
func TestHostUserWithoutCgroupRefuses(t *testing.T) {
	e := setup(t)
	a := e.nobody(t)
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("host lacks: systemd runs here: the user's manager makes the sandbox's scope")
	}
	ws := filepath.Join(e.base, "ws-refuse")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, int(a.uid), int(a.gid)); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(ws, "ran")
	sodactl := func(extra ...string) (string, error) {
		args := append(append([]string{"run"}, extra...), "--rw", ws, "--", "/bin/sh", "-c", "touch "+marker)
		cmd := exec.Command(filepath.Join(e.bin, "sodactl"), args...)
		cmd.SysProcAttr = a.credential()
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + a.home, "USER=" + a.name, "XDG_RUNTIME_DIR=" + a.runtime}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Control: with the waiver it runs, so a refusal below is the cgroup's.
	if out, err := sodactl("--allow-degraded", "cgroup"); err != nil {
		t.Fatalf("control with --allow-degraded cgroup: %v\n%s", err, out)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatalf("control: the command did not run: %v", err)
	}
	out, err := sodactl()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(out, "layer cgroup") {
		if err == nil {
			t.Skipf("host lacks: this host delegates a cgroup with the controllers to %s (the run was not refused)", a.name)
		}
		t.Fatalf("as %s without the waiver: %v, want exit 125 naming the cgroup layer\n%s", a.name, err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran although the cgroup layer was refused")
	}
	t.Logf("refused as expected: %s", strings.TrimSpace(out))
}

// run runs the battery in sodactl run as a and judges it.
func (e *env) run(t *testing.T, a account) {
	ws := filepath.Join(e.base, "ws-"+a.name)
	auditDir := filepath.Join(e.base, "audit-"+a.name)
	for _, d := range []string{ws, auditDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(a.uid), int(a.gid)); err != nil {
			t.Fatal(err)
		}
	}
	audit := filepath.Join(auditDir, "audit.json")

	// A host process of the same user, which it could signal and trace
	// outside the sandbox.
	sleeper := exec.Command("/bin/sleep", "120")
	sleeper.SysProcAttr = a.credential()
	sleeper.Dir = "/"
	if err := sleeper.Start(); err != nil {
		t.Fatalf("start the host process: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	plant := []string{a.home + "/.bashrc-planted-" + e.tag, "/etc/soda-hostbat-planted-" + e.tag,
		"/var/tmp/soda-hostbat-planted-" + e.tag, "/dev/shm/soda-hostbat-planted-" + e.tag,
		"/tmp/soda-hostbat-planted-" + e.tag, ws + "/../planted-outside-" + e.tag,
		"/usr/local/bin/soda-hostbat-planted-" + e.tag}
	hostTCP := e.hostTCP.ln.Addr().(*net.TCPAddr).Port
	echo := e.echo.ln.Addr().String()
	denied := []string{
		"example.com:443",                      // not granted: refused before any DNS lookup
		fmt.Sprintf("127.0.0.1:%d", hostTCP),   // the host service nothing grants
		fmt.Sprintf("localhost:%d", hostTCP),   // granted, but resolves to loopback
		"169.254.169.254:80",                   // metadata literal, not granted
		fmt.Sprintf("127.0.0.1:%d", hostTCP+1), // no service, not granted
	}
	var args []string
	if !a.root() {
		args = []string{"--allow-degraded", "cgroup"}
	}
	args = append([]string{"run"}, append(args,
		"--ro", e.bin, "--rw", ws, "--audit-json", audit, "--timeout", "60s",
		"--allow-private", echo, "--allow", fmt.Sprintf("localhost:%d", hostTCP),
		"--", filepath.Join(e.bin, "sbxprobe"), "battery",
		"--workspace", ws,
		"--host-home", a.home,
		"--host-pid", strconv.Itoa(sleeper.Process.Pid),
		"--host-tcp", strconv.Itoa(hostTCP),
		"--unix", e.sockPath,
		"--abstract", e.absName,
		"--allow-connect", echo,
		"--deny-connect", strings.Join(denied, ","),
		"--plant", strings.Join(plant, ","),
		"--secret-env", "SODA_HOSTBAT_SECRET,SODA_MCP_TOKEN_LEAK,LD_PRELOAD",
		"--host-machine-id", e.id.machineID,
		"--host-boot-id", e.id.bootID,
		"--host-cmdline-sha256", e.id.cmdlineSHA,
	)...)
	if len(e.id.macs) > 0 {
		args = append(args, "--host-macs", strings.Join(e.id.macs, ","))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "sodactl"), args...)
	cmd.SysProcAttr = a.credential()
	cmd.Dir = ws
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + a.home, "USER=" + a.name,
		"LD_PRELOAD=", "SODA_MCP_TOKEN_LEAK=x", "SODA_HOSTBAT_SECRET=hunter2"}
	if a.runtime != "" {
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+a.runtime)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		t.Fatalf("%s: battery did not run: %v\nstderr:\n%s\nstdout:\n%s", a.name, err, stderr.String(), stdout.String())
	}
	t.Logf("%s: sodactl run took %v", a.name, time.Since(start).Round(time.Millisecond))
	var out struct {
		Results []probeResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%s: battery output: %v\n%s", a.name, err, stdout.String())
	}
	if len(out.Results) < 60 {
		t.Fatalf("%s: only %d probes ran:\n%s", a.name, len(out.Results), stdout.String())
	}
	blocked, info, escaped := judge(t, a.name, out.Results)
	t.Logf("%s: %d probes blocked, %d informational, %d escaped", a.name, blocked, info, escaped)

	// Nothing planted reached the host.
	for _, p := range plant {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s, planted by the sandbox, exists on the host (or cannot be checked: %v)", a.name, p, err)
			_ = os.Remove(p)
		}
	}
	// No host listener saw a connection; the granted echo did.
	for _, l := range []struct {
		what string
		l    *listener
	}{{"tcp " + e.hostTCP.ln.Addr().String(), e.hostTCP}, {"unix " + e.sockPath, e.unixSock}, {"abstract @" + e.absName, e.abstract}} {
		if n := l.l.count(); n != 0 {
			t.Errorf("%s: the host listener %s was reached from the sandbox %d times", a.name, l.what, n)
		}
	}
	if e.echo.count() == 0 {
		t.Errorf("%s: the granted echo target saw no connection", a.name)
	}

	// Every denied target is audited as denied, the echo as allowed.
	decision := auditDecisions(t, audit)
	for _, d := range denied {
		if decision[d] != "deny" {
			t.Errorf("%s: CONNECT %s: audit decision %q, want deny", a.name, d, decision[d])
		}
	}
	if decision[echo] != "allow" {
		t.Errorf("%s: granted echo target %s audited as %q, want allow", a.name, echo, decision[echo])
	}

	// Root's run had its cgroup (no --allow-degraded): the audit says so.
	if a.root() && !cgroupApplied(t, audit) {
		t.Errorf("%s: the audit has no cgroup layer applied", a.name)
	}

	// The user's home below its runtime directory is gone.
	if !a.root() {
		state := filepath.Join(a.runtime, fmt.Sprintf("soda-sandbox-%d", a.uid))
		ents, _ := os.ReadDir(state)
		for _, ent := range ents {
			if ent.Name() != "uids" {
				t.Errorf("%s: left behind in %s: %s", a.name, state, ent.Name())
			}
		}
	}
}

// auditDecisions maps each egress target of an audit file to its decision.
func auditDecisions(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read audit: %v", err)
	}
	decision := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Egress *struct {
				Target   string `json:"target"`
				Decision string `json:"decision"`
			} `json:"egress"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if rec.Egress != nil {
			decision[rec.Egress.Target] = rec.Egress.Decision
		}
	}
	return decision
}

// cgroupApplied reports whether an audit file records the cgroup layer as
// applied (and never as degraded).
func cgroupApplied(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read audit: %v", err)
	}
	applied := false
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Event, Layer, State, Detail string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if rec.Event == "layer" && rec.Layer == "cgroup" {
			t.Logf("audit: cgroup %s: %s", rec.State, rec.Detail)
			if rec.State != "applied" {
				return false
			}
			applied = true
		}
	}
	return applied
}
