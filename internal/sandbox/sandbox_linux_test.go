package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/sandboxinit"
	"github.com/soda-project/soda/internal/workhome"
)

// testInitPath is the sandbox init of the package's tests: the test binary
// itself, which plays soda-sandbox-init (TestMain).
var testInitPath string

// TestMain lets the test binary play the sandbox's init (Linux.InitPath),
// as cmd/soda-sandbox-init does.
func TestMain(m *testing.M) {
	if sandboxinit.IsInit() {
		sandboxinit.Main()
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test binary:", err)
		os.Exit(1)
	}
	testInitPath = exe
	os.Exit(m.Run())
}

func TestFilterEnv(t *testing.T) {
	tests := []struct {
		kv     string
		kept   bool
		reason string
	}{
		{"TERM=xterm", true, ""},
		{"ANTHROPIC_API_KEY=sk-1", true, ""},
		{"LD_PRELOAD=/tmp/x.so", false, "reserved prefix"},
		{"SODA_SANDBOX_ROLE=init", false, "reserved prefix"},
		{"BASH_ENV=/tmp/x", false, "set by the sandbox or can inject code"},
		{"NODE_OPTIONS=--require=/tmp/x", false, "set by the sandbox or can inject code"},
		{"PATH=/tmp", false, "set by the sandbox or can inject code"},
		{"HOME=/root", false, "set by the sandbox or can inject code"},
		{"https_proxy=http://evil", false, "proxies are set by the sandbox"},
		{"FTP_PROXY=http://evil", false, "proxies are set by the sandbox"},
		{"SSH_AUTH_SOCK=/run/user/1000/ssh", false, "set by the sandbox or can inject code"},
		{"NOEQUALS", false, "not KEY=VALUE"},
		{"=x", false, "not KEY=VALUE"},
		{"A B=x", false, "invalid name"},
	}
	for _, tt := range tests {
		kept, dropped := FilterEnv([]string{tt.kv})
		if got := len(kept) == 1; got != tt.kept {
			t.Errorf("FilterEnv(%q) kept=%v, want %v", tt.kv, got, tt.kept)
			continue
		}
		if !tt.kept {
			if len(dropped) != 1 || dropped[0].Reason != tt.reason {
				t.Errorf("FilterEnv(%q) dropped=%+v, want reason %q", tt.kv, dropped, tt.reason)
			}
			if strings.Contains(dropped[0].Key, "=") {
				t.Errorf("FilterEnv(%q) leaked a value into the drop record: %q", tt.kv, dropped[0].Key)
			}
		}
	}
}

func TestParseLayers(t *testing.T) {
	tests := []struct {
		in      string
		want    []Layer
		wantErr bool
	}{
		{"", nil, false},
		{"cgroup", []Layer{LayerCgroup}, false},
		{"cgroup, seccomp,cgroup", []Layer{LayerCgroup, LayerSeccomp}, false},
		{"netns", nil, true},
		{"mountns", nil, true},
		{"bogus", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseLayers(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("ParseLayers(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNormalize(t *testing.T) {
	home := t.TempDir()
	ws := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"ok", Spec{Argv: []string{"true"}, Home: home, ReadWrite: []string{ws}}, ""},
		// A link planted in a workspace (rootlink -> /root) must not
		// redirect a later grant.
		{"grant through a link", Spec{Argv: []string{"true"}, Home: home, ReadWrite: []string{link}}, link + " is a symbolic link to " + ws},
		{"grant below a link", Spec{Argv: []string{"true"}, Home: home, ReadOnly: []string{filepath.Join(link, "sub")}}, "grant " + filepath.Join(ws, "sub") + " itself"},
		{"no command", Spec{Home: home}, "no command"},
		{"no home", Spec{Argv: []string{"true"}}, "no home"},
		{"bad id", Spec{ID: "../x", Argv: []string{"true"}, Home: home}, "invalid id"},
		{"root grant", Spec{Argv: []string{"true"}, Home: home, ReadOnly: []string{"/"}}, "may not be granted"},
		{"run grant", Spec{Argv: []string{"true"}, Home: home, ReadWrite: []string{"/run"}}, "may not be granted"},
		{"proc grant", Spec{Argv: []string{"true"}, Home: home, ReadOnly: []string{"/proc/1"}}, "may not be granted"},
		{"missing grant", Spec{Argv: []string{"true"}, Home: home, ReadWrite: []string{"/nonexistent/soda"}}, "no such file"},
		{"dir outside grants", Spec{Argv: []string{"true"}, Home: home, Dir: "/usr"}, "not inside a granted path"},
		{"tiny memory", Spec{Argv: []string{"true"}, Home: home, Limits: Limits{MemoryMax: 1 << 20}}, "below 16 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			err := s.Normalize()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Normalize: %v", err)
				}
				if s.ReadWrite[0] != ws || s.Dir != ws {
					t.Errorf("grant not resolved: rw=%v dir=%s, want %s", s.ReadWrite, s.Dir, ws)
				}
				if s.Limits.MemoryMax != DefaultLimits.MemoryMax || s.Egress.ProxyPort != DefaultProxyPort || s.LandlockMinABI != 6 {
					t.Errorf("defaults not filled: %+v", s)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Normalize error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckLimitsParsesOwnCgroup(t *testing.T) {
	// With no limit asked, any cgroup will do.
	if err := checkLimits(os.Getpid(), Limits{}, nil); err != nil {
		t.Fatalf("checkLimits without limits: %v", err)
	}
	if err := checkLimits(0x7fffffff, Limits{}, nil); err == nil {
		t.Fatal("checkLimits of a missing pid succeeded")
	}
}

// runSandbox starts argv in a sandbox with the given tweaks and returns its
// exit status and output.
func runSandbox(t *testing.T, tweak func(*Spec), argv ...string) (ExitStatus, string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	done := make(chan struct{})
	go func() { _, _ = stdout.ReadFrom(outR); close(done) }()
	done2 := make(chan struct{})
	go func() { _, _ = stderr.ReadFrom(errR); close(done2) }()
	spec := Spec{Argv: argv, Home: t.TempDir(), Stdout: outW, Stderr: errW,
		AllowDegraded: []Layer{LayerCgroup}} // no systemd, no delegated cgroup here: see test/sandbox for the full stack
	if tweak != nil {
		tweak(&spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	engine := testEngine(t, nil)
	sb, err := engine.Start(ctx, spec)
	var st ExitStatus
	if err == nil {
		st, err = sb.Wait(ctx)
	}
	outW.Close()
	errW.Close()
	<-done
	<-done2
	return st, stdout.String(), stderr.String(), err
}

func requireNamespaces(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if err := exec.Command("unshare", "--user", "--map-current-user", "--net", "--mount", "--pid", "--fork", "true").Run(); err != nil {
		t.Skipf("host lacks: unprivileged user namespaces unavailable here (%v); CI runs these tests as root", err)
	}
}

func TestSandboxRunsCommand(t *testing.T) {
	requireNamespaces(t)
	st, out, errOut, err := runSandbox(t, nil, "/bin/sh", "-c", "echo hello; id -u; cat /proc/self/status | grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):'; exit 3")
	if err != nil {
		t.Fatalf("sandbox: %v (stderr %s)", err, errOut)
	}
	if st.Code != 3 {
		t.Errorf("exit code = %d, want 3", st.Code)
	}
	for _, want := range []string{"hello\n", "NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if os.Geteuid() == 0 && strings.Contains(out, "\n0\n") {
		t.Errorf("command ran as uid 0 under a root caller:\n%s", out)
	}
}

// TestFailClosed makes each layer unavailable in turn: the sandbox must
// refuse to start, name the layer, and run nothing.
func TestFailClosed(t *testing.T) {
	requireNamespaces(t)
	layers := []Layer{LayerCgroup, LayerNetNS, LayerMountNS, LayerPIDNS, LayerLandlock, LayerSeccomp}
	if os.Geteuid() == 0 {
		layers = append(layers, LayerIDMap)
	} else {
		layers = append(layers, LayerUserNS)
	}
	for _, l := range layers {
		t.Run(string(l), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			_, _, _, err := runSandbox(t, func(s *Spec) {
				s.Knobs.Unavailable = []Layer{l}
				// Keep the cgroup waived (this host may have none) except
				// when it is the layer under test.
				if l == LayerCgroup {
					s.AllowDegraded = nil
				}
				s.ReadWrite = []string{filepath.Dir(marker)}
			}, "/bin/sh", "-c", "touch "+marker)
			var le *LayerError
			if !errors.As(err, &le) || le.Layer != l {
				t.Fatalf("err = %v, want a LayerError for %s", err, l)
			}
			if !strings.Contains(err.Error(), string(l)) {
				t.Errorf("error does not name the layer: %v", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command ran although layer %s was missing", l)
			}
		})
	}
}

// TestDegradedIsExplicit: with --allow-degraded the sandbox runs without
// the layer, and the audit says so.
func TestDegradedIsExplicit(t *testing.T) {
	requireNamespaces(t)
	for _, l := range []Layer{LayerLandlock, LayerSeccomp} {
		t.Run(string(l), func(t *testing.T) {
			var recs []Record
			var out bytes.Buffer
			outR, outW, _ := os.Pipe()
			done := make(chan struct{})
			go func() { _, _ = out.ReadFrom(outR); close(done) }()
			spec := Spec{Argv: []string{"/bin/sh", "-c", "grep ^Seccomp: /proc/self/status"}, Home: t.TempDir(), Stdout: outW,
				AllowDegraded: []Layer{LayerCgroup, l}, Knobs: Knobs{Unavailable: []Layer{l}}}
			ctx := context.Background()
			sb, err := testEngine(t, func(c *Config) { c.Audit = func(r Record) { recs = append(recs, r) } }).Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			outW.Close()
			<-done
			found := false
			for _, r := range recs {
				if r.Event == "layer" && r.Layer == l && r.State == "degraded" {
					found = true
				}
			}
			if !found {
				t.Errorf("no degraded audit record for %s: %+v", l, recs)
			}
			if l == LayerSeccomp && !strings.Contains(out.String(), "Seccomp:\t0") {
				t.Errorf("seccomp degraded but the filter is on: %s", out.String())
			}
		})
	}
}

func TestCommandNotFound(t *testing.T) {
	requireNamespaces(t)
	_, _, _, err := runSandbox(t, nil, "no-such-command-soda")
	if err == nil || !strings.Contains(err.Error(), "no-such-command-soda") {
		t.Fatalf("err = %v, want command not found", err)
	}
}

func TestTimeoutKillsEverything(t *testing.T) {
	requireNamespaces(t)
	start := time.Now()
	st, _, _, err := runSandbox(t, func(s *Spec) { s.Timeout = 300 * time.Millisecond },
		"/bin/sh", "-c", "trap '' TERM; sleep 60 & sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if !st.TimedOut {
		t.Errorf("status %+v: not marked timed out", st)
	}
	if d := time.Since(start); d > StopGrace+5*time.Second {
		t.Errorf("took %s to stop a command ignoring SIGTERM", d)
	}
}

// TestGrantSwappedForSymlink: a granted directory replaced by a symlink
// (to a place the sandbox must not reach) after the host checked it is
// refused, and nothing is written where the symlink points.
func TestGrantSwappedForSymlink(t *testing.T) {
	requireNamespaces(t)
	base := t.TempDir()
	ws, secret := filepath.Join(base, "ws"), filepath.Join(base, "secret")
	for _, d := range []string{ws, secret} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, swap := range []struct {
		name string
		do   func() error
	}{
		{"symlink", func() error {
			if err := os.Rename(ws, ws+".orig"); err != nil {
				return err
			}
			return os.Symlink("secret", ws)
		}},
		{"other directory", func() error {
			if err := os.Rename(ws, ws+".orig"); err != nil {
				return err
			}
			return os.Rename(secret, ws)
		}},
	} {
		t.Run(swap.name, func(t *testing.T) {
			_, _, _, err := runSandbox(t, func(s *Spec) {
				s.ReadWrite = []string{ws}
				s.Knobs.AfterCheck = func() {
					if err := swap.do(); err != nil {
						t.Error(err)
					}
				}
			}, "/bin/sh", "-c", "touch "+ws+"/planted")
			if err == nil || !strings.Contains(err.Error(), ws) {
				t.Fatalf("err = %v, want a refusal naming %s", err, ws)
			}
			matches, _ := filepath.Glob(filepath.Join(base, "*", "planted"))
			if len(matches) > 0 {
				t.Errorf("the command wrote through the swapped grant: %v", matches)
			}
			// Put things back for the next case.
			os.Remove(ws)
			os.RemoveAll(ws)
			if _, err := os.Stat(secret); err != nil {
				os.Mkdir(secret, 0o755)
			}
			os.Rename(ws+".orig", ws)
		})
	}
}

// TestUnenforcedErrorNamesGroupOnce: the refusal for limits a group cannot
// enforce names the group once ("cgroup cgroup cannot enforce" before).
func TestUnenforcedErrorNamesGroupOnce(t *testing.T) {
	tests := []struct{ mode, want string }{
		{"cgroup", "the cgroup cannot enforce memory.max, pids.max (controller not available)"},
		{"systemd-scope", "the systemd scope's cgroup cannot enforce memory.max, pids.max (controller not available)"},
		{"process-group", "the process group cannot enforce memory.max, pids.max (controller not available)"},
	}
	for _, tt := range tests {
		got := unenforcedError(tt.mode, []string{"memory.max", "pids.max"}).Error()
		if got != tt.want {
			t.Errorf("mode %s: %q, want %q", tt.mode, got, tt.want)
		}
		w := strings.Fields(got)
		for i := 1; i < len(w); i++ {
			if w[i] == w[i-1] {
				t.Errorf("mode %s: doubled word %q in %q", tt.mode, w[i], got)
			}
		}
	}
}

// TestSweepsKilledRunsCgroup: without systemd the sandbox's cgroup is a
// directory of ours; a run killed before its teardown (kill -9 of sodactl)
// leaves it empty, and the engine's explicit sweep (sodactl runs it at
// start) removes it, but not a sibling's.
func TestSweepsKilledRunsCgroup(t *testing.T) {
	requireNamespaces(t)
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var base string
	for _, l := range strings.Split(string(own), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			base = p
		}
	}
	mount := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		mount = "/sys/fs/cgroup/unified"
	}
	dir := filepath.Join(mount, base)
	stale := filepath.Join(dir, "soda-sandbox-sbx-killed0000")
	fresh := filepath.Join(dir, "soda-sandbox-sbx-starting00")
	for _, d := range []string{stale, fresh} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("cgroup %s is not writable here (%v): the sandbox uses no cgroup directory", dir, err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	removed, err := testEngine(t, func(c *Config) { c.Cgroups = CgroupDirect }).SweepLeftovers(t.Context())
	if err != nil {
		t.Fatalf("SweepLeftovers: %v (removed %v)", err, removed)
	}
	if !slices.Contains(removed, stale) {
		t.Errorf("SweepLeftovers removed %v, not the killed run's %s", removed, stale)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the killed run's cgroup %s is still there", stale)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a sibling's fresh cgroup %s was removed", fresh)
	}
}

// TestHomeIsOwnTmpfs (on this host; test/sandbox has the same in systemd):
// the home is a size-limited tmpfs of the sandbox's own, so filling it
// fails inside the sandbox and never reaches the host's /run; the files
// the host prepared in it are there.
func TestHomeIsOwnTmpfs(t *testing.T) {
	requireNamespaces(t)
	var home string
	st, out, errOut, err := runSandbox(t, func(s *Spec) {
		s.Limits.HomeSize = 16 << 20
		home = s.Home
		if err := os.WriteFile(filepath.Join(home, "agent.json"), []byte(`{"ok":true}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}, "/bin/sh", "-c", `cat "$HOME/agent.json"; echo; stat -f -c %T "$HOME"; dd if=/dev/zero of="$HOME/big" bs=1M count=64 2>&1; echo "dd=$?"`)
	if err != nil {
		t.Fatalf("sandbox: %v (stderr %s)", err, errOut)
	}
	if st.Code != 0 || !strings.Contains(out, `{"ok":true}`) || !strings.Contains(out, "tmpfs") ||
		!strings.Contains(out, "No space left on device") || strings.Contains(out, "dd=0") {
		t.Fatalf("want the prepared file, a tmpfs home and ENOSPC at 16 MiB; exit %d:\n%s", st.Code, out)
	}
	if fi, err := os.Stat(filepath.Join(home, "big")); err == nil {
		t.Errorf("the write reached the host's home directory (%d bytes)", fi.Size())
	}
}

// testEngine is an engine configured for this host (Detect), changed by
// mod, closed when the test ends.
func testEngine(t testing.TB, mod func(*Config)) *Linux {
	t.Helper()
	cfg := Detect()
	cfg.InitPath = testInitPath
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("new engine: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestMasksHideContents: a masked file under a read-write grant shows the
// mask's contents, cannot be written, removed or renamed, and its own
// contents are nowhere in the grant; the host file is unchanged; a mask
// of a file the sandbox does not see is left alone.
func TestMasksHideContents(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(conf, []byte(`{"env":{"KEY":"s3cr3t-value"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mcp.json", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	unseen := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(unseen, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `cd "$1"; cat mcp.json; echo; echo new > mcp.json && echo WROTE; rm -f mcp.json && echo REMOVED; mv mcp.json moved.json && echo MOVED
grep -rs s3cr3t . /run && echo FOUND; echo done`
	st, out, errOut, err := runSandbox(t, func(s *Spec) {
		s.ReadWrite = []string{dir}
		s.Masks = []Mask{{Path: filepath.Join(dir, "link.json"), Data: []byte(`{"masked":true}`)}, {Path: unseen, Data: []byte("y")}}
	}, "/bin/sh", "-c", script, "sh", dir)
	if err != nil {
		t.Fatalf("sandbox: %v (stderr %s)", err, errOut)
	}
	if st.Code != 0 || !strings.HasPrefix(out, `{"masked":true}`) || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("want the mask's contents; exit %d:\n%s\n%s", st.Code, out, errOut)
	}
	for _, bad := range []string{"WROTE", "REMOVED", "MOVED", "FOUND", "s3cr3t"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %s:\n%s", bad, out)
		}
	}
	if b, _ := os.ReadFile(conf); string(b) != `{"env":{"KEY":"s3cr3t-value"}}` {
		t.Errorf("the host file changed: %q", b)
	}
}

// TestMaskRefusesHardLinks: a file with another name (a hard link an
// earlier run may have planted) cannot be masked: that name would show it.
func TestMaskRefusesHardLinks(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(conf, []byte(`{"env":{"KEY":"s3cr3t"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(conf, filepath.Join(dir, "other-name")); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := runSandbox(t, func(s *Spec) {
		s.ReadWrite = []string{dir}
		s.Masks = []Mask{{Path: conf, Data: []byte("{}")}}
	}, "/bin/true")
	if err == nil || !strings.Contains(err.Error(), "2 hard links") {
		t.Fatalf("err = %v, want the hard links named", err)
	}
}

// TestNewHomeIsOwned: a home from NewHome is locked while this process
// lives, so a sweep leaves it; the sandbox that takes it as its home
// removes it at its teardown, and Close removes one no sandbox took.
func TestNewHomeIsOwned(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	engine := testEngine(t, nil)
	used, err := engine.NewHome(dir)
	if err != nil {
		t.Fatalf("NewHome: %v", err)
	}
	unused, err := engine.NewHome(dir)
	if err != nil {
		t.Fatalf("NewHome: %v", err)
	}
	homes, err := workhome.Open(dir, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	if n := homes.Sweep(slog.New(slog.DiscardHandler)); n != 0 {
		t.Errorf("a sweep removed %d homes of a live engine", n)
	}
	for _, h := range []string{used, unused} {
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("home %s: %v %v, want a 0700 directory", h, fi, err)
		}
	}
	sb, err := engine.Start(t.Context(), Spec{Argv: []string{"/bin/sh", "-c", "echo x > $HOME/f"}, Home: used, AllowDegraded: []Layer{LayerCgroup}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if st, err := sb.Wait(t.Context()); err != nil || st.Code != 0 {
		t.Fatalf("sandbox: %+v %v", st, err)
	}
	if _, err := os.Stat(used); err == nil {
		t.Errorf("the sandbox's home %s outlived it", used)
	}
	if _, err := os.Stat(unused); err != nil {
		t.Errorf("the home no sandbox took is gone before Close: %v", err)
	}
	if err := engine.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("left in the home directory after Close: %v", left)
	}
}
