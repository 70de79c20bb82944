package validate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestBenchValidate is make bench-validate (SODA_BENCH=1): validating a
// 1 KiB shell script end to end over HTTP against running the same
// shellcheck directly, in one run; the time added is compared with the
// overhead of a cold sodactl run -- true (over a plain true) measured in
// the same run. Target: at most 1.5 times it. Nothing is gated on a time.
func TestBenchValidate(t *testing.T) {
	if os.Getenv("SODA_BENCH") != "1" {
		t.Skip(testkit.BenchmarkOnly + " the validation benchmark runs with SODA_BENCH=1 (make bench-validate)")
	}
	requireSandbox(t)
	median, timeIt := testkit.Median, testkit.TimeIt
	script := "#!/bin/bash\nset -eu\n" + strings.Repeat("echo \"line ${1:-x}\"\n", 52)
	script = script[:1024]
	dir := t.TempDir()
	f := filepath.Join(dir, "a.sh")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	direct := median(timeIt(15, func() { _ = exec.Command("/usr/bin/shellcheck", "--norc", "--format=gcc", "--shell=bash", f).Run() }))
	plain := median(timeIt(15, func() { _ = exec.Command("true").Run() }))
	cold := median(timeIt(15, func() {
		cmd := exec.Command(filepath.Join(bin, "sodactl"), "run", "--direct", "--allow-degraded", "cgroup", "--no-network", "--", "true")
		cmd.Dir = "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sodactl run: %v\n%s", err, out)
		}
	}))

	cs := startHTTP(t, t.TempDir(), "shellcheck", shellcheckConf).connect(t)
	defer cs.Close()
	viaHTTP := median(timeIt(15, func() {
		v, text, _ := validate(t, cs, [2]string{"a.sh", script})
		if !v.Completed {
			t.Fatalf("not completed: %s", text)
		}
	}))
	added, overhead := viaHTTP-direct, cold-plain
	lines := []string{
		fmt.Sprintf("- shellcheck directly on a 1 KiB script, median of 15: %s", direct.Round(time.Microsecond)),
		fmt.Sprintf("- the same through soda-validate over HTTP (go-sdk client, median of 15): %s: %s added", viaHTTP.Round(time.Microsecond), added.Round(time.Microsecond)),
		fmt.Sprintf("- cold `sodactl run --direct -- true` over a plain `true`, medians of 15: %s - %s = %s overhead", cold.Round(time.Microsecond), plain.Round(time.Microsecond), overhead.Round(time.Microsecond)),
		fmt.Sprintf("- added ÷ cold-run overhead: %.2f (target <= 1.5)", float64(added)/float64(overhead)),
	}
	for _, l := range lines {
		t.Log(l)
	}
	if out := os.Getenv("SODA_BENCH_OUT"); out != "" {
		_ = os.WriteFile(out, []byte("# validation benchmark\n\n"+time.Now().UTC().Format(time.RFC3339)+" · soda-validated --transport http, host, root\n\n"+strings.Join(lines, "\n")+"\n"), 0o644)
	}
}
