package child

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
)

// fakeParentEnv makes the test binary a stand-in for soda-mcpd: it starts
// children as the environment says, reports them on stdout and waits to be
// killed.
const fakeParentEnv = "SODA_CHILD_TEST_PARENT"

// fakeChild is what the stand-in parent reports per child.
type fakeChild struct {
	Pid    int    `json:"pid"`
	SupPid int    `json:"sup_pid"`
	Cgroup string `json:"cgroup"`
}

// fakeParent starts SODA_CHILD_TEST_N children of SODA_CHILD_TEST_ARGV
// (JSON), supervised unless SODA_CHILD_TEST_UNSUPERVISED=1, in cgroups
// unless SODA_CHILD_TEST_MODE=process-group, recorded in the ledger
// SODA_CHILD_TEST_LEDGER if set.
func fakeParent() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv("SODA_CHILD_TEST_ARGV")), &argv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, _ := strconv.Atoi(os.Getenv("SODA_CHILD_TEST_N"))
	var placer cgroup.Placer = cgroup.NewProcessGroupPlacer()
	switch os.Getenv("SODA_CHILD_TEST_MODE") {
	case "process-group":
	case "scope":
		p, err := cgroup.NewSystemdPlacer(context.Background(), log, "soda-suptest", cgroup.DefaultSlice, cgroup.Limits{TasksMax: 8})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		placer = p
	default:
		p, err := cgroup.NewCgroupPlacer("soda-suptest", cgroup.Limits{}, cgroup.Parent{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		placer = p
	}
	spec := Spec{Argv: argv, Supervise: os.Getenv("SODA_CHILD_TEST_UNSUPERVISED") != "1"}
	if d := os.Getenv("SODA_CHILD_TEST_LEDGER"); d != "" {
		l, err := OpenLedger(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		spec.Ledger = l
	}
	enc := json.NewEncoder(os.Stdout)
	for i := range n {
		p, err := Start(context.Background(), log, placer, fmt.Sprintf("%d-%d", os.Getpid(), i), spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c := fakeChild{Pid: p.Pid()}
		if p.sup != nil {
			c.SupPid = p.sup.cmd.Process.Pid
		}
		if d, ok := p.Group().(cgroup.DirGroup); ok {
			c.Cgroup = d.CgroupDir()
		}
		_ = enc.Encode(c)
	}
	select {}
}

// sleepMarks returns three sleep durations unique to this run, to find
// the test's processes by their command line.
func sleepMarks() [3]string {
	base := 500000 + rand.IntN(400000)*3
	return [3]string{strconv.Itoa(base), strconv.Itoa(base + 1), strconv.Itoa(base + 2)}
}

// sleepers lists the pids of live "sleep MARK" processes.
func sleepers(marks [3]string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err != nil || st.state == 'Z' {
			continue
		}
		args := cmdline(pid)
		if len(args) == 2 && args[0] == "sleep" {
			for _, m := range marks {
				if args[1] == m {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

func requireCgroupPlacer(t *testing.T) {
	t.Helper()
	if _, err := cgroup.NewCgroupPlacer("soda-suptest", cgroup.Limits{}, cgroup.Parent{}); err != nil {
		t.Skipf("needs a writable cgroup v2 subtree: %v", err)
	}
}

// startFakeParent runs the stand-in parent and returns it with the
// children it reported.
func startFakeParent(t *testing.T, n int, argv []string, env ...string) (*exec.Cmd, []fakeChild) {
	t.Helper()
	a, _ := json.Marshal(argv)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fakeParentEnv+"=1", "SODA_CHILD_TEST_ARGV="+string(a), "SODA_CHILD_TEST_N="+strconv.Itoa(n))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dec := json.NewDecoder(bufio.NewReader(out))
	var cs []fakeChild
	for range n {
		var c fakeChild
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("stand-in parent: %v", err)
		}
		cs = append(cs, c)
	}
	return cmd, cs
}

func waitSleepers(t *testing.T, marks [3]string, want int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := sleepers(marks)
		if len(s) == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sleep processes, want %d", len(s), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cgroupPopulated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// TestSupervisedParentKilled: the case. A parent with three live
// children, each of which has put two grandchildren in the background
// (one in a session of its own), is killed with SIGKILL: nothing of the
// children survives and their cgroups are empty. (Unsupervised, as before,
// the direct children die of their parent-death signal and all six
// grandchildren survive in populated cgroups: SODA_CHILD_TEST_UNSUPERVISED=1
// shows it.)
func TestSupervisedParentKilled(t *testing.T) {
	for _, mode := range []string{"cgroup", "process-group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" {
				requireCgroupPlacer(t)
			}
			m := sleepMarks()
			argv := []string{"sh", "-c", fmt.Sprintf("setsid sleep %s & sleep %s & exec sleep %s", m[0], m[1], m[2])}
			env := []string{"SODA_CHILD_TEST_MODE=" + mode}
			if os.Getenv("SODA_CHILD_TEST_UNSUPERVISED") == "1" {
				env = append(env, "SODA_CHILD_TEST_UNSUPERVISED=1")
			}
			parent, cs := startFakeParent(t, 3, argv, env...)
			pids := waitSleepers(t, m, 9)
			t.Cleanup(func() {
				for _, p := range sleepers(m) {
					syscall.Kill(p, syscall.SIGKILL)
				}
			})
			if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = parent.Wait()
			deadline := time.Now().Add(5 * time.Second)
			for {
				left := sleepers(m)
				populated := 0
				for _, c := range cs {
					if c.Cgroup != "" && cgroupPopulated(c.Cgroup) {
						populated++
					}
				}
				if len(left) == 0 && populated == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("5 s after SIGKILL of the parent: %d of %d processes alive (%v), %d cgroups populated", len(left), len(pids), left, populated)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, c := range cs {
				if c.SupPid > 0 {
					waitGone(t, c.SupPid, "supervisor")
				}
				if c.Cgroup != "" {
					if _, err := os.Stat(c.Cgroup); err == nil {
						t.Errorf("cgroup %s left behind", c.Cgroup)
						os.Remove(c.Cgroup)
					}
				}
			}
		})
	}
}

// waitGone waits until pid is gone (or a zombie).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %d still runs", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSupervisedStdioAndExit: through the supervisor, the child's stdio is
// the parent's pipes, its exit status is reported as it is, and Stop's
// sequence (stdin close, SIGTERM, kill) still works.
func TestSupervisedStdioAndExit(t *testing.T) {
	ctx := context.Background()
	log := testLogger(t)
	placer := cgroup.NewProcessGroupPlacer()

	t.Run("exit status", func(t *testing.T) {
		p, err := Start(ctx, log, placer, "sup-exit", Spec{Supervise: true,
			Argv: []string{"sh", "-c", `read x; echo "got $x"; echo oops >&2; exit 3`}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(Grace{})
		if args := cmdline(p.Pid()); len(args) < 1 || args[0] != "sh" {
			t.Errorf("Pid() is %d (%q), want the child's", p.Pid(), args)
		}
		if _, err := io.WriteString(p.Stdin, "hello\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(p.Stdout).ReadString('\n')
		if err != nil || line != "got hello\n" {
			t.Fatalf("stdout %q, %v", line, err)
		}
		errLine, _ := bufio.NewReader(p.Stderr).ReadString('\n')
		if errLine != "oops\n" {
			t.Errorf("stderr %q", errLine)
		}
		waitExit(t, p)
		if code := exitCode(p); code != 3 || p.ExitStatus() != "exit status 3" {
			t.Errorf("exit %q (code %d), want exit status 3", p.ExitStatus(), code)
		}
	})
	t.Run("stdin close", func(t *testing.T) {
		p, err := Start(ctx, log, placer, "sup-eof", Spec{Supervise: true, Argv: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p.Stop(Grace{AfterStdinClose: 5 * time.Second, AfterTerm: 5 * time.Second})
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("cat took %s to see EOF on stdin", d)
		}
		if p.ExitStatus() != "exit status 0" {
			t.Errorf("cat: %s, want exit status 0", p.ExitStatus())
		}
	})
	t.Run("sigterm", func(t *testing.T) {
		p, err := Start(ctx, log, placer, "sup-term", Spec{Supervise: true, Argv: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Stop(Grace{AfterStdinClose: 10 * time.Millisecond, AfterTerm: 5 * time.Second})
		if p.ExitStatus() != "signal: terminated" {
			t.Errorf("sleep: %s, want signal: terminated", p.ExitStatus())
		}
	})
	t.Run("kill", func(t *testing.T) {
		p, err := Start(ctx, log, placer, "sup-kill", Spec{Supervise: true, Argv: []string{"sh", "-c", `trap "" TERM; while :; do sleep 1; done`}})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		sup := p.sup.cmd.Process.Pid
		p.Stop(Grace{AfterStdinClose: 10 * time.Millisecond, AfterTerm: 50 * time.Millisecond})
		if p.ExitStatus() != "signal: killed" {
			t.Errorf("child ignoring SIGTERM: %s, want signal: killed", p.ExitStatus())
		}
		waitGone(t, sup, "supervisor")
	})
	t.Run("start failure", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Start(ctx, log, placer, "sup-fail", Spec{Supervise: true, Argv: []string{"true"}, Dir: filepath.Join(dir, "missing")})
		if err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Start in a missing directory: %v, want the chdir error", err)
		}
	})
}

// statusFields reads the named fields of a /proc/PID/status text.
func statusFields(text string, names ...string) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n {
				out[n] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// TestSupervisedLeastPrivilege: run as root, a supervised child has no
// capability (effective, permitted, bounding, ambient), no_new_privs set,
// the configured uid and gid, and cannot leave its cgroup by writing its
// pid to the cgroup root's cgroup.procs. (Unsupervised, as before, it had
// every capability of its parent and moved itself out.)
func TestSupervisedLeastPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the point is what a child of a root soda-mcpd may do")
	}
	requireCgroupPlacer(t)
	mount, err := cgroup.Cgroup2Mount()
	if err != nil {
		t.Skip(err)
	}
	nobody := &Identity{Name: "nobody", UID: 65534, GID: 65534}
	placer, err := cgroup.NewCgroupPlacer("soda-suptest", cgroup.Limits{}, cgroup.Parent{})
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`cat /proc/self/status; if echo $$ > %s/cgroup.procs; then echo ESCAPED; else echo STAYED; fi; cat /proc/self/cgroup`, mount)
	for _, c := range []struct {
		name      string
		user      *Identity
		unsuper   bool
		uid, gid  string
		wantStays bool
	}{
		{"as nobody", nobody, false, "65534", "65534", true},
		// Root without capabilities still owns the cgroup root's files:
		// only another user keeps a child in its cgroup; this case
		// checks the capabilities and no_new_privs alone.
		{"as root", nil, false, "0", "0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Start(context.Background(), testLogger(t), placer, "sup-priv-"+strings.ReplaceAll(c.name, " ", "-"), Spec{
				Supervise: !c.unsuper, User: c.user, Argv: []string{"sh", "-c", script}, Dir: "/"})
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(p.Stdout)
			p.Stop(Grace{})
			f := statusFields(string(out), "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")
			for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if f[k] != "0000000000000000" {
					t.Errorf("%s = %q, want 0", k, f[k])
				}
			}
			if f["NoNewPrivs"] != "1" {
				t.Errorf("NoNewPrivs = %q, want 1", f["NoNewPrivs"])
			}
			if u := strings.Fields(f["Uid"]); len(u) != 4 || u[0] != c.uid || u[1] != c.uid || u[2] != c.uid || u[3] != c.uid {
				t.Errorf("Uid = %q, want %s everywhere", f["Uid"], c.uid)
			}
			if g := strings.Fields(f["Gid"]); len(g) != 4 || g[0] != c.gid || g[3] != c.gid {
				t.Errorf("Gid = %q, want %s", f["Gid"], c.gid)
			}
			if c.user != nil && f["Groups"] != "" {
				t.Errorf("Groups = %q, want none", f["Groups"])
			}
			if c.wantStays && !strings.Contains(string(out), "STAYED") {
				t.Errorf("the child left its cgroup:\n%s", out)
			}
		})
	}
}

// TestLedgerRecover: the worst case, the parent and every supervisor
// killed at once. The grandchildren survive in their cgroups (the control)
// until a successor's Recover kills them, logs it and removes the records
// and the cgroups.
func TestLedgerRecover(t *testing.T) {
	requireCgroupPlacer(t)
	dir := t.TempDir()
	m := sleepMarks()
	argv := []string{"sh", "-c", fmt.Sprintf("setsid sleep %s & sleep %s & exec sleep %s", m[0], m[1], m[2])}
	parent, cs := startFakeParent(t, 3, argv, "SODA_CHILD_TEST_LEDGER="+dir)
	testLedgerRecover(t, dir, m, parent, cs, 6, 0)
}

// TestLedgerRecoverProcessGroup: the same without cgroups. Recovery kills
// the members of each recorded process group (the three that stayed in
// it); the three that moved to sessions of their own are beyond it, as
// soda-mcpd(8) says (their supervisors, while alive, kill them).
func TestLedgerRecoverProcessGroup(t *testing.T) {
	dir := t.TempDir()
	m := sleepMarks()
	argv := []string{"sh", "-c", fmt.Sprintf("setsid sleep %s & sleep %s & exec sleep %s", m[0], m[1], m[2])}
	parent, cs := startFakeParent(t, 3, argv, "SODA_CHILD_TEST_LEDGER="+dir, "SODA_CHILD_TEST_MODE=process-group")
	testLedgerRecover(t, dir, m, parent, cs, 3, 3)
}

func testLedgerRecover(t *testing.T, dir string, m [3]string, parent *exec.Cmd, cs []fakeChild, wantKilled, wantLeft int) {
	waitSleepers(t, m, 9)
	t.Cleanup(func() {
		for _, p := range sleepers(m) {
			syscall.Kill(p, syscall.SIGKILL)
		}
		for _, c := range cs {
			if c.Cgroup != "" {
				os.Remove(c.Cgroup)
			}
		}
	})
	recs, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(recs) != 3 {
		t.Fatalf("%d records in the ledger, want 3", len(recs))
	}
	// Kill the supervisors first, so that none can sweep, then the parent
	// (which does not stop its children on its own: it has no Stop call).
	// (Stopping the supervisors with SIGSTOP would not do: once the parent
	// is dead their process groups are orphaned and the kernel sends them
	// SIGCONT.)
	for _, c := range cs {
		syscall.Kill(c.SupPid, syscall.SIGKILL)
	}
	for _, c := range cs {
		waitGone(t, c.SupPid, "supervisor")
	}
	parent.Process.Kill()
	parent.Wait()
	// The leaders die of their parent-death signal; the six grandchildren
	// survive.
	waitSleepers(t, m, 6)

	var logs syncBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	l, err := OpenLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.Recover(context.Background(), log, nil)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if n != wantKilled {
		t.Errorf("Recover killed %d processes, want %d", n, wantKilled)
	}
	if left := sleepers(m); len(left) != wantLeft {
		t.Errorf("after Recover %d processes left (%v), want %d", len(left), left, wantLeft)
	}
	if recs, _ := filepath.Glob(filepath.Join(dir, "*")); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
	for _, c := range cs {
		if c.Cgroup == "" {
			continue
		}
		if _, err := os.Stat(c.Cgroup); err == nil {
			t.Errorf("cgroup %s left", c.Cgroup)
		}
	}
	if got := strings.Count(logs.String(), "killed processes a previous run left behind"); got != 3 {
		t.Errorf("%d log lines about killed leftovers, want 3:\n%s", got, logs.String())
	}
	t.Log(logs.String())
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
