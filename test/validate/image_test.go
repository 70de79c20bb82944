package validate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestImageValidator: a kind with Image= runs its validator inside that
// image, pinned by digest: the verdict's digests and its attestation name
// the image's manifest digest, another image gives another validator
// digest, and a tag is refused when the worker starts.
func TestImageValidator(t *testing.T) {
	requireSandbox(t)
	reg := testkit.Registry(t)
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
	// /bin/tar too: the sandbox writes the sources in with it.
	d1 := testkit.Push(t, reg+"/soda/okcheck:1", testkit.ProbeImage(t, "ID=one\n", "tar"))
	d2 := testkit.Push(t, reg+"/soda/okcheck:2", testkit.ProbeImage(t, "ID=two\n", "tar"))
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
