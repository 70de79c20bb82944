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

// imageStore is the path of an image store (not made yet) below
// directories everyone may enter: the worker's sandboxes run as a pooled
// uid, which must reach the unpacked roots.
func imageStore(t *testing.T) string {
	t.Helper()
	base := filepath.Join(t.TempDir(), "images")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(base, "store")
}

// TestImageValidator: a kind with Image= runs its validator inside that
// image, pinned by digest: the verdict's digests and its attestation name
// the image's manifest digest, another image gives another validator
// digest, and a tag is refused when the worker starts.
func TestImageValidator(t *testing.T) {
	requireSandbox(t)
	reg := testkit.Registry(t)
	store := imageStore(t)
	// /bin/tar too: the sandbox writes the sources in with it.
	d1 := testkit.Push(t, reg+"/soda/okcheck:1", testkit.ProbeImage(t, "ID=one\n", "tar"))
	d2 := testkit.Push(t, reg+"/soda/okcheck:2", testkit.ProbeImage(t, "ID=two\n", "tar"))
	testkit.Pull(t, filepath.Join(bin, "sodactl"), store, reg+"/soda/okcheck:1", reg+"/soda/okcheck:2")
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

// TestPackagedValidators runs the shipped ShellCheck kind in both its
// forms (packaging/validate): shellcheck.conf on the host's shellcheck,
// and shellcheck-image.conf, its Image= set to an image the test builds
// from the host's shellcheck package and its libraries (with the test's
// probe as tar). Both give the same verdicts; the image form's names the
// image.
func TestPackagedValidators(t *testing.T) {
	requireSandbox(t)
	if _, err := os.Stat("/usr/bin/shellcheck"); err != nil {
		t.Fatalf("shellcheck is not installed (.ci/run installs it): %v", err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "packaging", "validate", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	host := read("shellcheck.conf")
	image := read("shellcheck-image.conf")

	reg := testkit.Registry(t)
	store := imageStore(t)
	entries := append(testkit.HostFilesLayer(t, "/usr/bin/shellcheck"), testkit.Entry{Name: "usr/bin/tar", Mode: 0o755, Data: testkit.StaticProbe(t)})
	ref := reg + "/tools/shellcheck:debian"
	digest := testkit.Push(t, ref, testkit.Image(t, testkit.Layer(t, entries)))
	testkit.Pull(t, filepath.Join(bin, "sodactl"), store, ref)
	// The shipped file, its placeholder replaced by the image built here.
	placeholder := "registry.example.com/tools/shellcheck@sha256:" + strings.Repeat("0", 64)
	if !strings.Contains(image, "Image="+placeholder+"\n") {
		t.Fatalf("shellcheck-image.conf does not name the placeholder %s", placeholder)
	}
	image = strings.Replace(image, placeholder, reg+"/tools/shellcheck@"+digest, 1)
	image = strings.Replace(image, "[Validator]\n", "[Validator]\nImageStore="+store+"\n", 1)

	good := "#!/bin/bash\nset -eu\necho \"hello $1\"\n"
	bad := "#!/bin/bash\nfor f in $(ls *.txt); do\n  cat $f\ndone\n"
	for _, form := range []struct{ name, conf, image string }{{"host", host, ""}, {"image", image, digest}} {
		t.Run(form.name, func(t *testing.T) {
			cs, _ := worker(t, "shellcheck", form.conf)
			v, text, isErr := validate(t, cs, [2]string{"ok.sh", good})
			if isErr || !v.Completed || v.Verdict == nil || *v.Verdict != "valid" {
				t.Fatalf("a valid script: %+v\n%s", v, text)
			}
			if v.Digests.Image != form.image {
				t.Errorf("the verdict's image digest %q, want %q", v.Digests.Image, form.image)
			}
			v, text, _ = validate(t, cs, [2]string{"bad.sh", bad})
			if v.Verdict == nil || *v.Verdict != "invalid" || len(v.Diagnostics) == 0 || !strings.Contains(v.Diagnostics[0].Message, "SC") {
				t.Fatalf("an invalid script: %+v\n%s", v, text)
			}
		})
	}
}
