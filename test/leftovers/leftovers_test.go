// Package leftovers tests, on this host as root, that what a binary
// that starts sandboxes leaves when it is killed with SIGKILL (sodactl
// run, sodactl sandbox mcp --direct, soda-validated) is removed by the
// next start of the same binary: the sandbox's cgroup directories in
// every hierarchy (cgroup v2 and each v1 one: cpu, memory, pids, ...) and
// its private home. A live sandbox of another process is never touched.
//
// The cgroup directories are made by the engine itself only without
// systemd (with systemd, sandboxes are transient scopes, which the
// engine's sweep stops: test/e2e covers that).
package leftovers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

var bin string

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		dir, err := testkit.BuildBinaries("soda-leftovers-test-", "sodactl", "soda-sandbox-init", "soda-validated")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		bin = dir
		defer os.RemoveAll(dir)
	}
	code := m.Run()
	if bin != "" {
		os.RemoveAll(bin)
	}
	os.Exit(code)
}

// requireDirectCgroups skips where the engine does not make the
// sandboxes' cgroup directories itself: not root, or systemd (scopes).
func requireDirectCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("host lacks: the engine writes the cgroup hierarchies as root only; CI runs these tests as root")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("host lacks: systemd is the service manager here: sandboxes are transient scopes (test/e2e)")
	}
	if len(cgroupMounts(t)) == 0 {
		t.Skip("host lacks: no cgroup file system mounted")
	}
}

// mount is a cgroup hierarchy's mount: where, which of its cgroups is
// the mount's root, and its controllers ("" for cgroup2).
type mount struct {
	point, root string
	ctrls       []string
}

// cgroupMounts lists the cgroup and cgroup2 mounts of this process.
func cgroupMounts(t *testing.T) []mount {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 3 || (b[0] != "cgroup" && b[0] != "cgroup2") {
			continue
		}
		m := mount{point: a[4], root: a[3]}
		if b[0] == "cgroup" {
			for o := range strings.SplitSeq(b[2], ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent") && o != "clone_children" && o != "noprefix" && o != "xattr" {
					m.ctrls = append(m.ctrls, o)
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// sandboxCgroups are the host paths of the cgroup directories process
// pid (a sandbox's init) is in whose name starts with soda-sandbox-, and
// that name.
func sandboxCgroups(t *testing.T, pid int) ([]string, string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("the sandbox's cgroups: %v", err)
	}
	mounts := cgroupMounts(t)
	var dirs []string
	name := ""
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || !strings.Contains(f[2], "/soda-sandbox-") {
			continue
		}
		name = filepath.Base(f[2])
		for _, m := range mounts {
			v2 := f[1] == "" && m.ctrls == nil
			v1 := f[1] != "" && m.ctrls != nil && slices.Equal(m.ctrls, strings.Split(f[1], ","))
			if rel, ok := strings.CutPrefix(f[2], m.root); (v1 || v2) && ok {
				dirs = append(dirs, filepath.Join(m.point, rel))
				break
			}
		}
	}
	if name == "" {
		t.Fatalf("sandbox init %d is in no soda-sandbox-* cgroup:\n%s", pid, b)
	}
	return dirs, name
}

// cgroupsNamed walks every cgroup hierarchy for directories named name.
func cgroupsNamed(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, m := range cgroupMounts(t) {
		_ = filepath.WalkDir(m.point, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if d.Name() == name {
				out = append(out, p)
				return fs.SkipDir
			}
			return nil
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// heldBy lists the files of dir whose flock pid holds (/proc/locks).
func heldBy(t *testing.T, dir string, pid int) []string {
	t.Helper()
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[uint64]bool{}
	for l := range strings.SplitSeq(string(locks), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) {
			if parts := strings.Split(f[5], ":"); len(parts) == 3 {
				if ino, err := strconv.ParseUint(parts[2], 10, 64); err == nil {
					inodes[ino] = true
				}
			}
		}
	}
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && inodes[fi.Sys().(*syscall.Stat_t).Ino] {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// newEntries lists what glob matches now that was not in before.
func newEntries(glob string, before []string) []string {
	now, _ := filepath.Glob(glob)
	var out []string
	for _, p := range now {
		if !slices.Contains(before, p) {
			out = append(out, p)
		}
	}
	return out
}

// waitInit waits for a sandbox init among pid's children.
func waitInit(t *testing.T, pid int, stderr *testkit.Buffer) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if inits := testkit.Inits(pid); len(inits) > 0 {
			// Placed once it is in its cgroups.
			time.Sleep(200 * time.Millisecond)
			return inits[0]
		}
	}
	t.Fatalf("no sandbox init under %d after 30 s\n%s", pid, stderr)
	return 0
}

// killed kills cmd with SIGKILL and waits until the sandbox's processes
// (init and its descendants as they were) are gone.
func killed(t *testing.T, cmd *exec.Cmd, init int) {
	t.Helper()
	killedBy(t, cmd, init, func() { _ = cmd.Wait() })
}

// killedBy is killed for a cmd that reap, not the test, waits for (the
// go-sdk's CommandTransport waits for its command itself: two Waits on
// one Cmd race).
func killedBy(t *testing.T, cmd *exec.Cmd, init int, reap func()) {
	t.Helper()
	procs := append([]int{init}, testkit.Descendants(init)...)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reap()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		alive := slices.DeleteFunc(slices.Clone(procs), func(p int) bool { return !testkit.Alive(p) })
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's processes %v outlived its killed owner by 10 s", alive)
		}
	}
}

// leftovers records what a killed owner's sandbox had, to find it again.
type leftovers struct {
	name  string   // soda-sandbox-ID
	dirs  []string // its cgroup directories
	homes []string // its home(s) (and their lock files)
}

// record finds the sandbox of init (a child of owner), its cgroup
// directories and the homes owner made since homesBefore.
func record(t *testing.T, owner, init int, homesBefore map[string][]string) leftovers {
	t.Helper()
	var l leftovers
	l.dirs, l.name = sandboxCgroups(t, init)
	for glob, before := range homesBefore {
		held := map[string]bool{}
		for _, p := range newEntries(glob, before) {
			if _, ok := held[filepath.Dir(p)]; !ok {
				for _, h := range heldBy(t, filepath.Dir(p), owner) {
					held[h] = true
				}
				held[filepath.Dir(p)] = true
			}
			lock := strings.TrimSuffix(p, ".lock") + ".lock"
			if _, err := os.Lstat(lock); err == nil && !held[lock] {
				continue // a sibling's (workhome: locked by its owner)
			}
			l.homes = append(l.homes, p)
		}
	}
	slices.Sort(l.homes)
	t.Logf("sandbox %s: cgroups %v, homes %v", l.name, l.dirs, l.homes)
	if len(l.dirs) < 2 {
		t.Fatalf("sandbox %s is in %d cgroup directories %v; want the v2 one and the v1 ones of its limits", l.name, len(l.dirs), l.dirs)
	}
	for _, d := range l.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("control: the sandbox's cgroup %s: %v", d, err)
		}
	}
	return l
}

// assertGone waits up to 15 s for the fresh start's sweep to remove
// every cgroup directory named l.name and l.homes.
func (l leftovers) assertGone(t *testing.T, killedStillThere bool) {
	t.Helper()
	if !killedStillThere {
		t.Fatal("control: the killed owner's sandbox left nothing to sweep")
	}
	var dirs, homes []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		dirs = cgroupsNamed(t, l.name)
		homes = homes[:0]
		for _, h := range l.homes {
			if _, err := os.Lstat(h); err == nil {
				homes = append(homes, h)
			}
		}
		if len(dirs)+len(homes) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(dirs) > 0 {
		t.Errorf("cgroup directories of the killed owner's sandbox left after a fresh start: %v", dirs)
	}
	if len(homes) > 0 {
		t.Errorf("homes of the killed owner's sandbox left after a fresh start: %v", homes)
	}
}

// stillThere says whether what l recorded is there after the kill (the
// control: there is something to sweep).
func (l leftovers) stillThere() bool {
	for _, d := range l.dirs {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// homeGlobs are where the binaries make homes: the engine's state
// directory (workhome) and the session's /tmp homes of old.
func homeGlobs(extra ...string) map[string][]string {
	m := map[string][]string{}
	for _, g := range append([]string{"/run/soda/sandbox/home-*", filepath.Join(os.TempDir(), "soda-session-home-*")}, extra...) {
		m[g], _ = filepath.Glob(g)
	}
	return m
}

// TestKilledRunIsSwept: kill -9 of sodactl run with a live sandbox, then
// a fresh sodactl run: the first run's cgroup directories (v2 and every
// v1 hierarchy) and its home are gone.
func TestKilledRunIsSwept(t *testing.T) {
	requireDirectCgroups(t)
	start := func(argv ...string) (*exec.Cmd, *testkit.Buffer) {
		cmd := exec.Command(filepath.Join(bin, "sodactl"), append([]string{"run", "--"}, argv...)...)
		stderr := &testkit.Buffer{}
		cmd.Stderr, cmd.Dir = stderr, "/"
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, stderr
	}
	homes := homeGlobs()
	cmd, stderr := start("sleep", "1000")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	init := waitInit(t, cmd.Process.Pid, stderr)
	l := record(t, cmd.Process.Pid, init, homes)
	killed(t, cmd, init)

	fresh, ferr := start("true")
	if err := fresh.Wait(); err != nil {
		t.Fatalf("a fresh sodactl run -- true: %v\n%s", err, ferr)
	}
	l.assertGone(t, true)
	if t.Failed() {
		t.Logf("fresh run's stderr:\n%s", ferr)
	}
}

// TestKilledSessionServerIsSwept: kill -9 of sodactl sandbox mcp
// --direct with a live session, then a fresh server: the first one's
// sandbox cgroups and home are gone.
func TestKilledSessionServerIsSwept(t *testing.T) {
	requireDirectCgroups(t)
	start := func() (*exec.Cmd, *mcp.ClientSession, *testkit.Buffer) {
		cmd := exec.Command(filepath.Join(bin, "sodactl"), "sandbox", "mcp", "--direct")
		stderr := &testkit.Buffer{}
		cmd.Stderr, cmd.Dir = stderr, "/"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "leftovers", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect to sodactl sandbox mcp: %v\n%s", err, stderr)
		}
		t.Cleanup(func() { cs.Close() })
		return cmd, cs, stderr
	}
	homes := homeGlobs()
	cmd, cs, stderr := start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("sandbox_create: %v %+v\n%s", err, res, stderr)
	}
	init := waitInit(t, cmd.Process.Pid, stderr)
	l := record(t, cmd.Process.Pid, init, homes)
	killedBy(t, cmd, init, func() { cs.Close() })
	there := l.stillThere()

	_, _, ferr := start() // closed (stdin, then a wait) at the end: it leaves nothing
	l.assertGone(t, there)
	if t.Failed() {
		t.Logf("fresh server's stderr:\n%s", ferr)
	}
}

// TestKilledValidatorIsSwept: kill -9 of soda-validated with its spare
// sandbox live, then a fresh start of the same kind: the first one's
// sandbox cgroups and homes are gone.
func TestKilledValidatorIsSwept(t *testing.T) {
	requireDirectCgroups(t)
	conf, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "leftovers.conf"), []byte("[Validator]\nExecStart=/bin/true %FILES%\nFiles=*.sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, io.WriteCloser, *testkit.Buffer) {
		cmd := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", conf, "--state-dir", state, "leftovers")
		stderr := &testkit.Buffer{}
		cmd.Stderr, cmd.Stdout, cmd.Dir = stderr, io.Discard, "/"
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// End of input ends it with its sandboxes; SIGKILL only if
			// it hangs.
			in.Close()
			kill := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
			_ = cmd.Wait()
			kill.Stop()
		})
		return cmd, in, stderr
	}
	homes := homeGlobs(filepath.Join(state, "leftovers", "tmp", "*"))
	cmd, _, stderr := start()
	init := waitInit(t, cmd.Process.Pid, stderr)
	l := record(t, cmd.Process.Pid, init, homes)
	killed(t, cmd, init)
	there := l.stillThere()

	_, _, ferr := start()
	l.assertGone(t, there)
	if t.Failed() {
		t.Logf("fresh worker's stderr:\n%s", ferr)
	}
}
