//go:build !soda_lean

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/soda-project/soda/internal/imagestore"
)

// tinyImage is an image of one layer holding the file hello.
func tinyImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/hello", Typeflag: tar.TypeReg, Mode: 0o755, Size: 5},
	} {
		tw.WriteHeader(h)
		if h.Size > 0 {
			tw.Write([]byte("hello"))
		}
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImageCommands(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := tinyImage(t)
	ref, _ := name.ParseReference(host + "/soda/tiny:v1")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	store := filepath.Join(t.TempDir(), "store")
	sodactl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"image"}, append(args, "--store", store)...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := sodactl("pull", host+"/soda/tiny:v1")
	if code != 0 || out != host+"/soda/tiny@"+digest.String()+"\n" {
		t.Fatalf("pull: %d %q %q", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("pull printed progress on a pipe: %q", errOut)
	}
	code, out, _ = sodactl("list")
	if code != 0 || !strings.Contains(out, digest.String()) || !strings.Contains(out, host+"/soda/tiny:v1") || !strings.HasPrefix(out, "DIGEST") {
		t.Errorf("list: %d %q", code, out)
	}
	code, out, _ = sodactl("list", "--json")
	var listed struct {
		Digest string   `json:"digest"`
		Names  []string `json:"names"`
		Rootfs string   `json:"rootfs"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || listed.Digest != digest.String() {
		t.Errorf("list --json: %d %q", code, out)
	}
	code, out, _ = sodactl("inspect", host+"/soda/tiny:v1")
	var inspected struct {
		Digest string `json:"digest"`
		Rootfs string `json:"rootfs"`
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &inspected) != nil || inspected.Digest != digest.String() || len(inspected.Layers) != 1 {
		t.Fatalf("inspect: %d %q", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(inspected.Rootfs, "bin/hello")); err != nil || string(b) != "hello" {
		t.Errorf("rootfs: %q %v", b, err)
	}

	// docker save, then import into a second store.
	archive := filepath.Join(t.TempDir(), "tiny.tar")
	tag, _ := name.NewTag("soda/tiny:v1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = sodactl("import", archive); code != 0 || !strings.HasPrefix(out, "sha256:") {
		t.Errorf("import: %d %q %q", code, out, errOut)
	}

	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"inspect", "sha256:" + strings.Repeat("0", 64)}, 1, "not in the store"},
		{[]string{"pull"}, 2, "takes 1 argument"},
		{[]string{"frob"}, 2, "unknown command"},
		{[]string{"list", "--all"}, 2, "--all is for image prune"},
		{[]string{"pull", "10.0.0.1:1/x:y", "--timeout", "3s"}, 1, "plain HTTP is only for a registry on the loopback address"},
	} {
		code, _, errOut := sodactl(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.err) {
			t.Errorf("%v: %d %q; want %d %q", tt.args, code, errOut, tt.code, tt.err)
		}
	}

	if code, out, errOut = sodactl("rm", host+"/soda/tiny:v1"); code != 0 || !strings.Contains(out, "removed") {
		t.Errorf("rm: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sodactl("prune", "--all"); code != 0 || !strings.Contains(out, "image(s)") {
		t.Errorf("prune: %d %q %q", code, out, errOut)
	}
	if code, out, _ = sodactl("list"); code != 0 || strings.Contains(out, "sha256:") {
		t.Errorf("list after rm and prune: %q", out)
	}
	var help bytes.Buffer
	if code := run([]string{"image", "--help"}, &help, io.Discard); code != 0 || !strings.Contains(help.String(), "sodactl image pull") {
		t.Errorf("help: %d %q", code, help.String())
	}
}

func TestRepoOf(t *testing.T) {
	for ref, want := range map[string]string{
		"alpine": "alpine", "alpine:3": "alpine", "127.0.0.1:5000/a/b:v1": "127.0.0.1:5000/a/b",
		"127.0.0.1:5000/a/b": "127.0.0.1:5000/a/b", "r.example/a:v1@sha256:00": "r.example/a", "a@sha256:00": "a",
	} {
		if got := repoOf(ref); got != want {
			t.Errorf("repoOf(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := progressTo(&buf)
	d := "sha256:" + strings.Repeat("ab", 32)
	p(imagestore.Event{Kind: imagestore.EventFetch, Digest: d, Index: 0, Count: 2, Size: 3 << 20})
	p(imagestore.Event{Kind: imagestore.EventUnpack, Digest: d, Index: 1, Count: 2})
	p(imagestore.Event{Kind: imagestore.EventStored, Digest: d})
	want := "fetching layer 1/2 sha256:abababababab (3.0M)\nunpacking layer 2/2 sha256:abababababab\nstored " + d + "\n"
	if buf.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", buf.String(), want)
	}
}
