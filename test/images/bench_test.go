package imagestest

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestBenchImages (make bench-images, SODA_BENCH=1, root) measures, in
// one run: sodactl run --image of an unpacked image against sodactl run
// on the host's root (the same static true, median of runs), and sodactl
// image pull (fetch, verify, unpack) of a 64 MiB image from a registry on
// loopback against crane export piped into tar -x, the nearest thing a
// user would pick, both timed to the unpacked tree.
func TestBenchImages(t *testing.T) {
	if os.Getenv("SODA_BENCH") != "1" {
		t.Skip(testkit.BenchmarkOnly + " make bench-images runs it (SODA_BENCH=1)")
	}
	if os.Geteuid() != 0 {
		testkit.SkipHostLacks(t, "root")
	}
	bin, err := testkit.BuildBinaries("soda-images-bench-", "sodactl", "soda-sandbox-init")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	_ = os.Chmod(bin, 0o755)
	crane := filepath.Join(bin, "crane")
	build := exec.Command("go", "build", "-modfile=../../tools/go.mod", "-o", crane, "github.com/google/go-containerregistry/cmd/crane")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build crane (tools/go.mod): %v\n%s", err, out)
	}
	// The image: bin/true, and 64 files of 1 MiB of random bytes (what
	// compresses as little as real binaries do, a little worse).
	entries := []testkit.Entry{{Name: "bin/", Mode: 0o755}, {Name: "bin/true", Mode: 0o755, Data: testkit.StaticProbe(t)}, {Name: "data/", Mode: 0o755}}
	for i := 0; i < 64; i++ {
		d := make([]byte, 1<<20)
		_, _ = rand.Read(d)
		entries = append(entries, testkit.Entry{Name: fmt.Sprintf("data/%02d", i), Mode: 0o644, Data: d})
	}
	raw := testkit.Layer(t, entries)
	ref := testkit.Registry(t) + "/soda/bench:1"
	testkit.Push(t, ref, testkit.Image(t, raw))
	mb := float64(len(raw)) / (1 << 20)
	timeIt := func(what string, f func(i int) error) time.Duration {
		var ds []time.Duration
		for i := 0; i < 5; i++ {
			start := time.Now()
			if err := f(i); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		return ds[len(ds)/2]
	}
	work := t.TempDir()
	soda := timeIt("sodactl image pull", func(i int) error {
		out, err := exec.Command(filepath.Join(bin, "sodactl"), "image", "pull", "--store", filepath.Join(work, fmt.Sprintf("store%d", i)), ref).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	peer := timeIt("crane export | tar -x", func(i int) error {
		dir := filepath.Join(work, fmt.Sprintf("crane%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cmd := exec.Command("sh", "-c", `"$0" export --insecure "$1" - | tar -x -C "$2"`, crane, ref, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	store := filepath.Join(work, "store0")
	run := func(args ...string) func(int) error {
		return func(int) error {
			out, err := exec.Command(filepath.Join(bin, "sodactl"), append([]string{"run", "--direct"}, args...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		}
	}
	var hostRuns, imageRuns []time.Duration
	for round := 0; round < 3; round++ { // alternated, so that drift hits both
		hostRuns = append(hostRuns, timeIt("sodactl run -- true", run("--", "/bin/true")))
		imageRuns = append(imageRuns, timeIt("sodactl run --image -- true", run("--image-store", store, "--image", ref, "--", "/bin/true")))
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		return d[len(d)/2]
	}
	h, im := med(hostRuns), med(imageRuns)
	lines := []string{
		"| figure | soda | peer / baseline | ratio | target |",
		"|---|---|---|---|---|",
		fmt.Sprintf("| pull + unpack of a %.0f MiB image from loopback, MB/s (median of 5) | %.0f | %.0f (crane export \\| tar -x) | %.2f | ≥ 0.8 |", mb, mb/soda.Seconds(), mb/peer.Seconds(), peer.Seconds()/soda.Seconds()),
		fmt.Sprintf("| `sodactl run --image -- true` vs `sodactl run -- true`, median | %.1f ms | %.1f ms | %.2f | ≤ 1.2 |", float64(im.Microseconds())/1000, float64(h.Microseconds())/1000, float64(im)/float64(h)),
	}
	out := "# images benchmark\n\n" + time.Now().UTC().Format(time.RFC3339) + "\n\n" + strings.Join(lines, "\n") + "\n"
	t.Log("\n" + out)
	if p := os.Getenv("SODA_BENCH_OUT"); p != "" {
		_ = os.WriteFile(p, []byte(out), 0o644)
	}
}
