package imagestest

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

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
	probe := filepath.Join(bin, "probe")
	b := exec.Command("go", "build", "-o", probe, "./probe")
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	probeData, _ := os.ReadFile(probe)
	// The image: bin/true, and 64 files of 1 MiB of random bytes (what
	// compresses as little as real binaries do, a little worse).
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(data)
	}
	_ = tw.WriteHeader(&tar.Header{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir})
	add("bin/true", 0o755, probeData)
	_ = tw.WriteHeader(&tar.Header{Name: "data/", Mode: 0o755, Typeflag: tar.TypeDir})
	for i := 0; i < 64; i++ {
		d := make([]byte, 1<<20)
		_, _ = rand.Read(d)
		add(fmt.Sprintf("data/%02d", i), 0o644, d)
	}
	_ = tw.Close()
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, _ := mutate.AppendLayers(empty.Image, layer)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/soda/bench:1"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
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
