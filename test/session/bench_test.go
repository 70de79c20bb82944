package session

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

// TestBenchSessions is make bench-sessions (SODA_BENCH=1): in one run, a
// warm sandbox_exec of true through the stdio server against a cold
// sodactl run --direct -- true, sandbox_create with 100 seed files and
// sandbox_diff over 1,000 files against the same cold run, and the memory
// of an idle session. The figures go to the log and, with
// SODA_BENCH_OUT, to that file; nothing is gated on a time.
func TestBenchSessions(t *testing.T) {
	if os.Getenv("SODA_BENCH") != "1" {
		t.Skip(testkit.BenchmarkOnly + " the sessions benchmark runs with SODA_BENCH=1 (make bench-sessions)")
	}
	requireSandbox(t)
	sodactl := filepath.Join(bin, "sodactl")
	median, timeIt := testkit.Median, testkit.TimeIt
	cold := func() time.Duration {
		return median(timeIt(15, func() {
			cmd := exec.Command(sodactl, "run", "--direct", "--allow-degraded", "cgroup", "--no-network", "--", "true")
			cmd.Dir = "/"
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sodactl run -- true: %v\n%s", err, out)
			}
		}))
	}
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	coldBefore := cold()
	warm := timeIt(100, func() {
		must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "argv": []any{"true"}})
	})
	var seed []any
	for i := 0; i < 100; i++ {
		seed = append(seed, file(fmt.Sprintf("src/pkg%d/file%d.go", i%10, i), strings.Repeat("package x // line\n", 40)))
	}
	var createIDs []string
	create := timeIt(6, func() {
		r, _ := must(t, cs, "sandbox_create", map[string]any{"files": seed})
		createIDs = append(createIDs, r.SandboxID)
	})
	for _, cid := range createIDs {
		must(t, cs, "sandbox_close", map[string]any{"sandbox_id": cid})
	}
	// 1,000 files, a tenth changed.
	r, _ = must(t, cs, "sandbox_create", nil)
	big := r.SandboxID
	var files []any
	for i := 0; i < 1000; i++ {
		files = append(files, file(fmt.Sprintf("d%02d/f%04d.txt", i%50, i), strings.Repeat(fmt.Sprintf("line %d\n", i), 30)))
	}
	for i := 0; i < len(files); i += 250 {
		must(t, cs, "sandbox_seed", map[string]any{"sandbox_id": big, "files": files[i:min(i+250, len(files))]})
	}
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": big, "command": "for f in d0*/f00*.txt; do echo changed >> $f; done"})
	var changes int
	diffs := timeIt(10, func() {
		r, _ := must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": big})
		changes = len(r.Diff.Changes)
	})
	coldAfter := cold()
	coldMed := (coldBefore + coldAfter) / 2

	// Memory: the server's and the sandboxes' resident memory for 8 idle
	// sessions against none.
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": big})
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": id})
	// On a fresh server: the one above grew its heap diffing.
	cs.Close()
	cs, _ = server(t)
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": must1(t, cs)})
	time.Sleep(300 * time.Millisecond)
	srv := serverPID(t)
	base := testkit.RSSKiB(srv)
	for i := 0; i < 8; i++ {
		must(t, cs, "sandbox_create", map[string]any{"files": []any{file("a", "x")}})
	}
	time.Sleep(300 * time.Millisecond)
	perServer := float64(testkit.RSSKiB(srv)-base) / 8
	inits := testkit.Inits(srv)
	var sbKiB int64
	for _, p := range inits {
		sbKiB += testkit.RSSKiB(p)
		for _, d := range testkit.Descendants(p) {
			sbKiB += testkit.RSSKiB(d)
		}
	}
	perSandbox := float64(sbKiB) / float64(max(len(inits), 1))

	p50 := median(warm)
	lines := []string{
		fmt.Sprintf("- cold `sodactl run --direct -- true`, median of 15 before and 15 after: %s and %s", coldBefore.Round(time.Microsecond), coldAfter.Round(time.Microsecond)),
		fmt.Sprintf("- warm `sandbox_exec` of `true` through the stdio server, p50 of 100: %s: ratio %.3f of the cold run (target <= 0.25)", p50.Round(time.Microsecond), float64(p50)/float64(coldMed)),
		fmt.Sprintf("- `sandbox_create` with 100 seed files, median of 6: %s: ratio %.2f of the cold run (target <= 1)", median(create).Round(time.Microsecond), float64(median(create))/float64(coldMed)),
		fmt.Sprintf("- `sandbox_diff` over 1,000 files (%d changed), median of 10: %s: ratio %.2f of the cold run (target <= 1)", changes, median(diffs).Round(time.Microsecond), float64(median(diffs))/float64(coldMed)),
		fmt.Sprintf("- memory per idle session (8 sessions): server +%.0f KiB RSS each; sandbox (init and its children) %.0f KiB RSS each (%d inits)", perServer, perSandbox, len(inits)),
	}
	for _, l := range lines {
		t.Log(l)
	}
	if out := os.Getenv("SODA_BENCH_OUT"); out != "" {
		host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		head := fmt.Sprintf("# sessions benchmark\n\n%s · %d cores · Linux %s · sodactl sandbox mcp --direct (host, root: %v)\n\n",
			time.Now().UTC().Format(time.RFC3339), numCPU(), strings.TrimSpace(string(host)), os.Geteuid() == 0)
		if err := os.WriteFile(out, []byte(head+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// must1 creates a sandbox and returns its id.
func must1(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	r, _ := must(t, cs, "sandbox_create", nil)
	return r.SandboxID
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// serverPID is the newest sodactl sandbox mcp of this test process.
func serverPID(t *testing.T) int {
	t.Helper()
	kids := testkit.Children(os.Getpid())
	for i := len(kids) - 1; i >= 0; i-- {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", kids[i])); strings.Contains(string(b), "sandbox\x00mcp") {
			return kids[i]
		}
	}
	t.Fatalf("no sodactl sandbox mcp among the children %v", kids)
	return 0
}
