package mcpd

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	mcpdBinOnce sync.Once
	mcpdBin     string
	mcpdBinErr  error
)

// buildMcpd builds cmd/soda-mcpd once per test binary.
func buildMcpd(t *testing.T) string {
	t.Helper()
	mcpdBinOnce.Do(func() {
		mcpdBin = filepath.Join(filepath.Dir(echoBin), "soda-mcpd")
		if out, err := exec.Command("go", "build", "-o", mcpdBin, "github.com/soda-project/soda/cmd/soda-mcpd").CombinedOutput(); err != nil {
			mcpdBinErr = fmt.Errorf("build soda-mcpd: %v\n%s", err, out)
		}
	})
	if mcpdBinErr != nil {
		t.Fatal(mcpdBinErr)
	}
	return mcpdBin
}

// foreground is a soda-mcpd run in the foreground by a test.
type foreground struct {
	cmd   *exec.Cmd
	addr  string
	tok   string
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (f *foreground) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.lines, "\n")
}

// startForeground starts soda-mcpd NAME on a free port with its runtime
// directory (and so its child ledger) in rundir, and waits until it serves.
func startForeground(t *testing.T, name, rundir string, argv ...string) *foreground {
	t.Helper()
	bin := buildMcpd(t)
	f := &foreground{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), done: make(chan struct{})}
	tokFile := filepath.Join(rundir, "tok")
	args := append([]string{"--name", name, "--listen", f.addr, "--token-file", tokFile, "--log-format", "json", "--"}, argv...)
	f.cmd = exec.Command(bin, args...)
	f.cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+rundir, "JOURNAL_STREAM=")
	stderr, _ := f.cmd.StderrPipe()
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.cmd.Process.Kill()
		<-f.done
		f.cmd.Wait()
	})
	serving := make(chan struct{})
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
			if strings.Contains(sc.Text(), `"msg":"serving"`) {
				once.Do(func() { close(serving) })
			}
		}
	}()
	select {
	case <-serving:
	case <-f.done:
		t.Fatalf("soda-mcpd exited before serving:\n%s", f.log())
	case <-time.After(15 * time.Second):
		t.Fatalf("soda-mcpd not serving after 15s:\n%s", f.log())
	}
	b, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	f.tok = strings.TrimSpace(string(b))
	return f
}

// session opens an MCP session (one child) and returns its id.
func (f *foreground) session(t *testing.T) string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest("POST", "http://"+f.addr+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+f.tok)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: %d %s (session %q)\n%s", resp.StatusCode, b, id, f.log())
	}
	return id
}

// procsMatching lists live processes whose argv is exactly argv.
func procsMatching(argv ...string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.TrimSuffix(string(b), "\x00") == strings.Join(argv, "\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// grandchildren lists the test's live background sleeps.
func grandchildren(marks [2]string) []int {
	return append(procsMatching("sleep", marks[0]), procsMatching("sleep", marks[1])...)
}

func waitCount(t *testing.T, what string, f func() []int, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := f()
		if len(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d processes %v after %s, want %d", what, len(got), got, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// crashScenario starts the foreground soda-mcpd with three
// sessions whose children each leave two grandchildren in the background.
func crashScenario(t *testing.T, name, rundir string) (*foreground, [2]string) {
	t.Helper()
	base := 600000 + int(time.Now().UnixNano()%100000)*2
	marks := [2]string{strconv.Itoa(base), strconv.Itoa(base + 1)}
	script := fmt.Sprintf("setsid sleep %s & sleep %s & exec %s", marks[0], marks[1], echoBin)
	f := startForeground(t, name, rundir, "sh", "-c", script)
	t.Cleanup(func() {
		for _, p := range grandchildren(marks) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	for range 3 {
		f.session(t)
	}
	waitCount(t, "grandchildren before the kill", func() []int { return grandchildren(marks) }, 6, 10*time.Second)
	return f, marks
}

// TestKilledLeavesNothing is the reproduction: foreground
// soda-mcpd, three live sessions whose children each put two processes in
// the background (one in its own session), kill -9 of soda-mcpd. Nothing
// may survive it. (Before the supervisors, all six grandchildren did.)
func TestKilledLeavesNothing(t *testing.T) {
	rundir := t.TempDir()
	f, marks := crashScenario(t, fmt.Sprintf("crash%d", os.Getpid()), rundir)
	f.cmd.Process.Signal(syscall.SIGKILL)
	waitCount(t, "grandchildren after kill -9 of soda-mcpd", func() []int { return grandchildren(marks) }, 0, 5*time.Second)
	waitCount(t, "echo servers after kill -9 of soda-mcpd", func() []int { return procsMatching(echoBin) }, 0, 5*time.Second)
}

// TestRestartRecoversLeftovers: the worst case, soda-mcpd and its
// children's supervisors all killed. The grandchildren survive that (the
// control); the next soda-mcpd of the same name kills them before it
// serves, logs it, and removes the records.
func TestRestartRecoversLeftovers(t *testing.T) {
	rundir := t.TempDir()
	name := fmt.Sprintf("recover%d", os.Getpid())
	f, marks := crashScenario(t, name, rundir)
	recs, _ := filepath.Glob(filepath.Join(rundir, name+".children", "*.json"))
	if len(recs) != 3 {
		t.Fatalf("%d child records in %s, want 3", len(recs), rundir)
	}
	sups := procsMatching("soda-child-supervisor")
	var ours []int
	for _, p := range sups {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil {
			fs := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
			if fs[1] == strconv.Itoa(f.cmd.Process.Pid) {
				ours = append(ours, p)
			}
		}
	}
	if len(ours) != 3 {
		t.Fatalf("%d supervisors of soda-mcpd %d, want 3", len(ours), f.cmd.Process.Pid)
	}
	for _, p := range ours {
		syscall.Kill(p, syscall.SIGKILL)
	}
	f.cmd.Process.Signal(syscall.SIGKILL)
	<-f.done
	f.cmd.Wait()
	time.Sleep(200 * time.Millisecond)
	if n := len(grandchildren(marks)); n != 6 {
		t.Fatalf("control: %d grandchildren survive soda-mcpd and its supervisors, want 6", n)
	}
	g := startForeground(t, name, rundir, echoBin)
	if n := len(grandchildren(marks)); n != 0 {
		t.Errorf("%d grandchildren survive the restart:\n%s", n, g.log())
	}
	log := g.log()
	rec := strings.Index(log, "killed processes a previous run left behind")
	if rec < 0 || strings.Count(log, "killed processes a previous run left behind") != 3 {
		t.Errorf("want 3 log records of killed leftovers:\n%s", log)
	}
	if serving := strings.Index(log, `"msg":"serving"`); rec > serving {
		t.Errorf("recovery logged after serving:\n%s", log)
	}
	if recs, _ := filepath.Glob(filepath.Join(rundir, name+".children", "*")); len(recs) != 0 {
		t.Errorf("records left after recovery: %v", recs)
	}
}

// TestChildLeastPrivilege: run as root in the foreground without User=,
// soda-mcpd runs its children as an unprivileged user, with no capability
// and no_new_privs; such a child cannot leave its cgroup by writing its pid
// to the cgroup root. (Before, it ran as root with every capability and
// moved itself out.)
func TestChildLeastPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the point is what a child of a root soda-mcpd may do")
	}
	root := ""
	for _, m := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(m, "cgroup.subtree_control")); err == nil {
			root = m
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup2 hierarchy mounted")
	}
	// Not t.TempDir(): its parent is private to root.
	out, err := os.MkdirTemp("", "soda-priv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(out, "report")
	script := fmt.Sprintf(`{ cat /proc/self/status; if echo $$ > %s/cgroup.procs; then echo ESCAPED; else echo STAYED; fi; } > %s 2>&1; exec %s`, root, report, echoBin)
	f := startForeground(t, fmt.Sprintf("priv%d", os.Getpid()), t.TempDir(), "sh", "-c", script)
	f.session(t)
	var text string
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(report)
		text = string(b)
		if strings.Contains(text, "STAYED") || strings.Contains(text, "ESCAPED") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if fields[k] != "0000000000000000" {
			t.Errorf("child %s = %q, want 0", k, fields[k])
		}
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("child NoNewPrivs = %q, want 1", fields["NoNewPrivs"])
	}
	if uid := strings.Fields(fields["Uid"]); len(uid) == 0 || uid[0] == "0" {
		t.Errorf("child Uid = %q, want an unprivileged user", fields["Uid"])
	}
	if !strings.Contains(text, "STAYED") {
		t.Errorf("child left its cgroup:\n%s", text)
	}
	if !strings.Contains(f.log(), "children run supervised") {
		t.Errorf("no log line saying who the children run as:\n%s", f.log())
	}
}

// TestStopRemovesLedger: a clean stop (SIGTERM) leaves no NAME.children
// directory in the runtime directory, also after a crash: the records a
// killed soda-mcpd left are recovered at the next start, and that one's
// clean stop removes the directory.
func TestStopRemovesLedger(t *testing.T) {
	tests := []struct {
		name  string
		crash bool // kill -9 a first soda-mcpd with a live child
	}{
		{"clean stop", false},
		{"clean stop after a crash", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rundir := t.TempDir()
			name := fmt.Sprintf("ledger%d-%d", os.Getpid(), i)
			dir := filepath.Join(rundir, name+".children")
			if tt.crash {
				f := startForeground(t, name, rundir, echoBin)
				f.session(t)
				f.cmd.Process.Signal(syscall.SIGKILL)
				<-f.done
				f.cmd.Wait()
				if recs, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(recs) != 1 {
					t.Fatalf("control: %d child records after kill -9, want 1", len(recs))
				}
			}
			f := startForeground(t, name, rundir, echoBin)
			f.session(t)
			if recs, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(recs) != 1 {
				t.Fatalf("%d child records with one session, want 1:\n%s", len(recs), f.log())
			}
			f.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-f.done:
			case <-time.After(15 * time.Second):
				t.Fatalf("soda-mcpd did not stop within 15s of SIGTERM:\n%s", f.log())
			}
			if err := f.cmd.Wait(); err != nil {
				t.Errorf("soda-mcpd: %v\n%s", err, f.log())
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				ents, _ := os.ReadDir(dir)
				t.Errorf("%s left after a clean stop (%v, %d entries):\n%s", dir, err, len(ents), f.log())
			}
			if ents, _ := os.ReadDir(rundir); len(ents) != 1 || ents[0].Name() != "tok" {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("runtime directory after a clean stop: %v, want only the test's token file", names)
			}
		})
	}
}
