package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// liveSandbox starts a persistent sandbox with a read-write workspace,
// its cgroup layer required where the host can enforce it (root, cgroup
// v1 here), and closes it at the end of the test.
func liveSandbox(t *testing.T, strict bool, tweak func(*Spec)) (*Sandbox, string) {
	t.Helper()
	ws := t.TempDir()
	spec := Spec{Persistent: true, Home: t.TempDir(), ReadWrite: []string{ws}, AllowDegraded: []Layer{LayerCgroup}, Stderr: os.Stderr}
	if strict {
		strictCgroup(&spec)
	}
	if tweak != nil {
		tweak(&spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	engine := testEngine(t, nil)
	sb, err := engine.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start live sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb, ws
}

// execOut runs argv in sb with stdin (if any) and returns its status and
// stdout.
func execOut(t *testing.T, sb *Sandbox, stdin *os.File, timeout time.Duration, argv ...string) (ExitStatus, string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = out.ReadFrom(r); close(done) }()
	st, err := sb.Exec(context.Background(), ExecSpec{Argv: argv, Stdin: stdin, Stdout: w, Timeout: timeout})
	w.Close()
	<-done
	r.Close()
	return st, out.String(), err
}

// TestLiveSandboxExec: commands run one after the other and at the same
// time in one live sandbox share its files, network namespace and cgroup;
// each has its own stdout and exit status; a timeout kills only its own
// command; closing the sandbox leaves no process and no cgroup directory.
func TestLiveSandboxExec(t *testing.T) {
	requireNamespaces(t)
	// Where the host enforces the limits without systemd (root, cgroup
	// v1 here), the cgroup layer is required and its limits checked.
	strict := false
	t.Run("cgroup1", func(t *testing.T) {
		defer func() { strict = !t.Skipped() }()
		requireCgroup1(t)
	})
	const id = "sbx-liveexec001"
	sb, ws := liveSandbox(t, strict, func(s *Spec) {
		s.ID = id
		s.Limits.MemoryMax = 300 << 20
		s.Limits.TasksMax = 77
	})
	hostNet, _ := os.Readlink("/proc/self/ns/net")

	// Sequential: the first writes, the second reads; both in one netns.
	st, out1, err := execOut(t, sb, nil, 0, "/bin/sh", "-c", "echo shared > "+ws+"/f; readlink /proc/self/ns/net; exit 3")
	if err != nil || st.Code != 3 {
		t.Fatalf("first exec: %+v %v (out %q)", st, err, out1)
	}
	st, out2, err := execOut(t, sb, nil, 0, "/bin/sh", "-c", "cat "+ws+"/f; readlink /proc/self/ns/net")
	if err != nil || st.Code != 0 {
		t.Fatalf("second exec: %+v %v (out %q)", st, err, out2)
	}
	net1 := strings.TrimSpace(out1)
	if !strings.HasPrefix(out2, "shared\n") {
		t.Errorf("second exec did not read the first's file: %q", out2)
	}
	if net2 := strings.TrimSpace(strings.TrimPrefix(out2, "shared\n")); net1 == "" || net1 != net2 || net1 == hostNet {
		t.Errorf("network namespaces: first %q, second %q, host %q; want one, not the host's", net1, net2, hostNet)
	}

	// Concurrent: both block on their stdin until the host has looked at
	// the cgroup with both running; each exits with its own status.
	type result struct {
		st  ExitStatus
		out string
		err error
	}
	var wg sync.WaitGroup
	res := make([]result, 2)
	var stdinW []*os.File
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stdinW = append(stdinW, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			script := "read line; echo $line-" + strconv.Itoa(i) + "; cat " + ws + "/f; readlink /proc/self/ns/net; exit " + strconv.Itoa(10+i)
			res[i].st, res[i].out, res[i].err = execOut(t, sb, r, 0, "/bin/sh", "-c", script)
		}()
	}
	if paths := v1Paths(sb.group); strict && len(paths) > 0 {
		pidsDir := filepath.Join("/sys/fs/cgroup/pids", paths["pids"])
		var n int
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			b, _ := os.ReadFile(filepath.Join(pidsDir, "cgroup.procs"))
			if n = len(strings.Fields(string(b))); n >= 3 {
				break
			}
		}
		if n < 3 {
			t.Errorf("the sandbox's pids cgroup %s holds %d processes with two commands running; want init and both", pidsDir, n)
		}
		if b, _ := os.ReadFile(filepath.Join(pidsDir, "pids.max")); strings.TrimSpace(string(b)) != "77" {
			t.Errorf("pids.max = %q, want 77", b)
		}
		if b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", paths["memory"], "memory.limit_in_bytes")); strings.TrimSpace(string(b)) != strconv.Itoa(300<<20) {
			t.Errorf("memory.limit_in_bytes = %q, want %d", b, 300<<20)
		}
	} else {
		t.Logf("cgroup not checked: strict=%v, v1 paths %v (the limits are checked where the host enforces them: root, no systemd)", strict, paths)
	}
	for _, w := range stdinW {
		_, _ = w.WriteString("hello\n")
		w.Close()
	}
	wg.Wait()
	for i, r := range res {
		want := "hello-" + strconv.Itoa(i) + "\nshared\n" + net1 + "\n"
		if r.err != nil || r.st.Code != 10+i || r.out != want {
			t.Errorf("concurrent exec %d: %+v %v, out %q; want code %d, out %q", i, r.st, r.err, r.out, 10+i, want)
		}
	}

	// A timeout kills its command (and its process group), not the
	// sandbox nor a command running beside it.
	slowR, slowW, _ := os.Pipe()
	defer slowW.Close()
	var side result
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer slowR.Close()
		side.st, side.out, side.err = execOut(t, sb, slowR, 0, "/bin/sh", "-c", "read line; echo $line")
	}()
	t0 := time.Now()
	st, _, err = execOut(t, sb, nil, 300*time.Millisecond, "/bin/sh", "-c", "sleep 987.5 & sleep 987.5")
	if err != nil || !st.TimedOut || st.Code != 137 {
		t.Errorf("timed-out exec: %+v %v; want TimedOut, 137", st, err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the timeout took %s", d)
	}
	_, _ = slowW.WriteString("alive\n")
	wg.Wait()
	if side.err != nil || side.st.Code != 0 || side.out != "alive\n" {
		t.Errorf("the command beside the timed-out one: %+v %v %q", side.st, side.err, side.out)
	}
	if left := procsMatching("987.5"); len(left) > 0 {
		t.Errorf("the timed-out command's process group outlived it: %v", left)
	}
	// A command gets its stdio and nothing else of init's descriptors
	// (ls's own directory is 3).
	if st, out, err := execOut(t, sb, nil, 0, "/bin/ls", "/proc/self/fd"); err != nil || st.Code != 0 || out != "0\n1\n2\n3\n" {
		t.Errorf("descriptors of an exec: %+v %v %q, want 0-2 and ls's own 3", st, err, out)
	}
	var ce *CommandError
	if _, _, err := execOut(t, sb, nil, 0, "no-such-command"); !errors.As(err, &ce) || ce.Code != 127 {
		t.Errorf("missing command: %v, want a CommandError 127", err)
	}

	// Something left running in a new session ends with the sandbox.
	if st, _, err := execOut(t, sb, nil, 0, "/bin/sh", "-c", "setsid sleep 987.75 >/dev/null & echo started"); err != nil || st.Code != 0 {
		t.Fatalf("background exec: %+v %v", st, err)
	}
	// A loaded machine may take a while to exec it: the control waits.
	for deadline := time.Now().Add(10 * time.Second); len(procsMatching("sleep 987.75")) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procsMatching("987.75")) == 0 {
		t.Fatal("control: the background sleep is not running")
	}
	tClose := time.Now()
	if err := sb.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	t.Logf("close took %s", time.Since(tClose))
	if left := procsMatching("987.75"); len(left) > 0 {
		t.Errorf("processes outlived the sandbox: %v", left)
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/soda-sandbox-" + id)
	more, _ := filepath.Glob("/sys/fs/cgroup/*/*/*/soda-sandbox-" + id)
	if l := append(left, more...); len(l) > 0 {
		t.Errorf("cgroup directories left: %v", l)
	}
	if _, _, err := execOut(t, sb, nil, 0, "true"); err == nil {
		t.Error("exec after close succeeded")
	}
}

// procsMatching lists the processes whose command line contains s.
func procsMatching(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); err == nil && strings.Contains(cmd, s) {
			out = append(out, e.Name()+" "+cmd)
		}
	}
	return out
}

// TestExecNotPersistent: Exec on a one-command sandbox is refused.
func TestExecNotPersistent(t *testing.T) {
	var sb Sandbox
	if _, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrNotPersistent) {
		t.Fatalf("Exec = %v, want ErrNotPersistent", err)
	}
}

// BenchmarkExecTrue is a second command (true) in a live sandbox, from
// the request to its exit status (the target: at most twice
// BenchmarkPlainTrue, measured in the same run).
func BenchmarkExecTrue(b *testing.B) {
	if os.Geteuid() != 0 {
		if err := exec.Command("unshare", "--user", "--map-current-user", "--net", "--mount", "--pid", "--fork", "true").Run(); err != nil {
			b.Skipf("host lacks: unprivileged user namespaces unavailable here (%v)", err)
		}
	}
	ctx := context.Background()
	engine := testEngine(b, nil)
	sb, err := engine.Start(ctx, Spec{Persistent: true, Home: b.TempDir(), AllowDegraded: []Layer{LayerCgroup}})
	if err != nil {
		b.Fatalf("start live sandbox: %v", err)
	}
	defer sb.Close(ctx)
	if st, err := sb.Exec(ctx, ExecSpec{Argv: []string{"/bin/true"}}); err != nil || st.Code != 0 {
		b.Fatalf("first exec: %+v %v", st, err)
	}
	for b.Loop() {
		if st, err := sb.Exec(ctx, ExecSpec{Argv: []string{"/bin/true"}}); err != nil || st.Code != 0 {
			b.Fatalf("exec: %+v %v", st, err)
		}
	}
}

// BenchmarkPlainTrue is true forked, executed and waited for by the host.
func BenchmarkPlainTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
