package validate

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pushImage builds an image of /bin/probe (test/images/probe; also as
// /bin/tar, which the sandbox needs to write the sources in) and an
// os-release holding release, pushes it to reg as repo:tag and returns
// its manifest digest.
func pushImage(t *testing.T, reg, repo, tag, release string) string {
	t.Helper()
	probe := filepath.Join(t.TempDir(), "probe")
	build := exec.Command("go", "build", "-o", probe, "github.com/soda-project/soda/test/images/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the validator: %v\n%s", err, out)
	}
	data, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		mode int64
		data []byte
	}{{"bin/", 0o755, nil}, {"bin/probe", 0o755, data}, {"bin/tar", 0o755, data}, {"etc/", 0o755, nil}, {"etc/os-release", 0o644, []byte(release)}} {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(e.data)
	}
	_ = tw.Close()
	layerData := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerData)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

// TestImageValidator: a kind with Image= runs its validator inside that
// image, pinned by digest: the verdict's digests and its attestation name
// the image's manifest digest, another image gives another validator
// digest, and a tag is refused when the worker starts.
func TestImageValidator(t *testing.T) {
	requireSandbox(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	base := filepath.Join(t.TempDir(), "images")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(base, "store")
	pull := func(ref string) {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "sodactl"), "image", "pull", "--store", store, ref).CombinedOutput()
		if err != nil {
			t.Fatalf("sodactl image pull %s: %v\n%s", ref, err, out)
		}
	}
	d1 := pushImage(t, reg, "soda/okcheck", "1", "ID=one\n")
	d2 := pushImage(t, reg, "soda/okcheck", "2", "ID=two\n")
	pull(reg + "/soda/okcheck:1")
	pull(reg + "/soda/okcheck:2")
	conf := func(image string) string {
		return "[Validator]\nExecStart=/bin/probe %FILES%\nFiles=*.txt\nOutput=gcc\nValidExit=0\nInvalidExit=1\nImage=" + image + "\nImageStore=" + store + "\n"
	}
	run := func(digest string) verdict {
		t.Helper()
		cs, _ := worker(t, "okcheck", conf(reg+"/soda/okcheck@"+digest))
		v, text, isErr := validate(t, cs, [2]string{"a.txt", "this is ok\n"})
		if isErr || !v.Completed || v.Verdict == nil || *v.Verdict != "valid" {
			t.Fatalf("valid file in image %s: %+v\n%s", digest, v, text)
		}
		bad, text, _ := validate(t, cs, [2]string{"b.txt", "nope\n"})
		if bad.Verdict == nil || *bad.Verdict != "invalid" || len(bad.Diagnostics) != 1 {
			t.Fatalf("invalid file in image %s: %+v\n%s", digest, bad, text)
		}
		return v
	}
	v1, v2 := run(d1), run(d2)
	if v1.Digests.Image != d1 || v2.Digests.Image != d2 {
		t.Errorf("verdicts' image digests %q, %q; want the manifests' %s, %s", v1.Digests.Image, v2.Digests.Image, d1, d2)
	}
	if v1.Digests.Validator == v2.Digests.Validator {
		t.Error("another image gave the same validator digest")
	}
	found := false
	for _, c := range v1.Attestation.Predicate.Configuration {
		if strings.HasSuffix(c.Name, "@"+d1) && "sha256:"+c.Digest["sha256"] == d1 {
			found = true
		}
	}
	if !found {
		t.Errorf("the attestation does not name the image %s: %+v", d1, v1.Attestation.Predicate.Configuration)
	}
	// A tag is refused when the worker starts.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "okcheck.conf"), []byte(conf(reg+"/soda/okcheck:1")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "soda-validated"), "--config-dir", dir, "--state-dir", t.TempDir(), "okcheck").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "by digest") {
		t.Errorf("Image= with a tag: %v\n%s", err, out)
	}
}
