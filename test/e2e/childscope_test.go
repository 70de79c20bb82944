package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// scopePkgs are the packages whose systemd integration tests
// (TestScopeIntegration*) TestChildScopes runs in a box: the scope placer's
// and the supervisor's.
var scopePkgs = []string{"internal/cgroup", "internal/child"}

// TestChildScopes runs the systemd integration tests of internal/cgroup
// and internal/child (a transient scope per child: limits, kills, stop
// propagation, a killed owner, a supervised child) against the real
// systemd of a box, once with --cgroup hybrid, where the box's systemd
// enforces MemoryMax= and TasksMax= through this host's v1 controllers,
// and once with --cgroup v2: each package's test binary, built on the
// host, runs in the box with SODA_SYSTEMD_TEST=1
// (test/systemd/run-child-scope-test.sh does the same by hand). Each inner
// test's outcome is logged and recorded for test/skipreport, so that a
// skip inside the box counts as one.
func TestChildScopes(t *testing.T) {
	if os.Getenv("SODA_E2E") != "1" {
		t.Skip("the child scope tests run with SODA_E2E=1 (make test-e2e): they boot a systemd box")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root and test/box/sdbox check: not running as root (uid %d)", os.Geteuid())
	}
	repo := repoRoot(t)
	sdbox := filepath.Join(repo, "test", "box", "sdbox")
	tmp, err := os.MkdirTemp("/var/tmp", "soda-e2e-child-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil { // one test runs the binary as nobody
		t.Fatal(err)
	}
	for _, pkg := range scopePkgs {
		build := exec.Command("go", "test", "-c", "-o", filepath.Join(tmp, filepath.Base(pkg)+".test"), "./"+pkg)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s's tests: %v\n%s", pkg, err, out)
		}
	}
	for _, mode := range []string{"hybrid", "v2"} {
		t.Run(mode, func(t *testing.T) {
			if out, err := exec.Command(sdbox, "check", "--cgroup", mode).CombinedOutput(); err != nil {
				testkit.SkipHostLacks(t, "a systemd box with --cgroup %s (test/box/sdbox check): %s", mode, strings.TrimSpace(string(out)))
			}
			b := bootBox(t, sdbox, "--cgroup", mode, "--bind", repo, "--bind", tmp, "--timeout", "60")
			b.onFailJournal(t)
			var outs []testkit.Outcome
			for _, pkg := range scopePkgs {
				r := b.exec(runOpts{timeout: 5 * time.Minute}, "sh", "-c", fmt.Sprintf(
					"cd %s/%s && exec env SODA_SYSTEMD_TEST=1 %s/%s.test -test.count=1 -test.v -test.run 'ScopeIntegration'", repo, pkg, tmp, filepath.Base(pkg)))
				got := innerOutcomes("github.com/soda-project/soda/"+pkg, r.stdout)
				var pass, skip []string
				for _, o := range got {
					switch o.Action {
					case "pass":
						pass = append(pass, o.Test)
					case "skip":
						skip = append(skip, o.Test+" ("+o.Reason+")")
					}
				}
				t.Logf("%s in the box (--cgroup %s): %d passed, %d skipped: %s", pkg, mode, len(pass), len(skip), strings.Join(skip, "; "))
				if r.err != nil {
					t.Errorf("%s's systemd integration tests failed in the box (--cgroup %s):\n%s", pkg, mode, r)
				}
				if len(pass) == 0 {
					t.Errorf("no systemd integration test of %s passed in the box (--cgroup %s):\n%s", pkg, mode, r)
				}
				outs = append(outs, got...)
			}
			// Under the tests' own names: one that skips in one mode (v2:
			// limits only accepted) and runs in the other ran.
			if err := testkit.RecordOutcomes(outs); err != nil {
				t.Error(err)
			}
		})
	}
}

// innerResult matches a test's result line of go test -v output.
var innerResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// innerOutcomes reads go test -v output of package pkg: each test's
// result, and a skip's reason (the test's last message before its
// --- SKIP line).
func innerOutcomes(pkg, out string) []testkit.Outcome {
	var outs []testkit.Outcome
	last := ""
	for _, l := range strings.Split(out, "\n") {
		if m := innerResult.FindStringSubmatch(l); m != nil {
			o := testkit.Outcome{Package: pkg, Test: m[2], Action: strings.ToLower(m[1])}
			if o.Action == "skip" {
				o.Reason = last
			}
			outs = append(outs, o)
			continue
		}
		if _, msg, ok := strings.Cut(l, ".go:"); ok {
			if _, after, ok := strings.Cut(msg, ": "); ok {
				last = after
			}
		}
	}
	return outs
}
