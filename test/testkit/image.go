package testkit

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one entry of a test image's layer: a directory when Name ends
// in "/", a symbolic link to Link when Link is set, else a file of Data.
type Entry struct {
	Name string
	Mode int64
	Data []byte
	Link string
}

// StaticProbe builds test/images/probe as a static binary and returns it:
// the program of the tests' images (it reports what the sandbox's root
// holds, validates files holding "ok", and acts as tar and true).
func StaticProbe(t testing.TB) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "probe")
	build := exec.Command("go", "build", "-o", out, "github.com/soda-project/soda/test/images/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/images/probe: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Layer writes entries as an uncompressed tar layer.
func Layer(t testing.TB, entries []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Size: int64(len(e.Data)), Typeflag: tar.TypeReg}
		switch {
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.Link, 0
		case strings.HasSuffix(e.Name, "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Image is an image of the one layer raw (a tar stream).
func Image(t testing.TB, raw []byte) v1.Image {
	t.Helper()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ProbeImage is an image of StaticProbe as /bin/probe (and, with more
// names, as /bin/NAME too: tar, true; a name with a slash is a path from
// the root, its directories made) with release as /etc/os-release.
func ProbeImage(t testing.TB, release string, more ...string) v1.Image {
	t.Helper()
	probe := StaticProbe(t)
	entries := []Entry{{Name: "bin/", Mode: 0o755}, {Name: "bin/probe", Mode: 0o755, Data: probe}}
	for _, n := range more {
		if !strings.Contains(n, "/") {
			entries = append(entries, Entry{Name: "bin/" + n, Mode: 0o755, Data: probe})
			continue
		}
		parts := strings.Split(n, "/")
		for i := range parts[:len(parts)-1] {
			entries = append(entries, Entry{Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755})
		}
		entries = append(entries, Entry{Name: n, Mode: 0o755, Data: probe})
	}
	entries = append(entries, Entry{Name: "etc/", Mode: 0o755}, Entry{Name: "etc/os-release", Mode: 0o644, Data: []byte(release)})
	return Image(t, Layer(t, entries))
}

// Configure is img with env and workingDir as its configuration's Env
// and WorkingDir.
func Configure(t testing.TB, img v1.Image, env []string, workingDir string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Env, cf.Config.WorkingDir = env, workingDir
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// HostFilesLayer is the entries of a layer of the host's files
// (absolute paths) and, for the programs among them, the shared libraries
// ldd lists, at the paths they have on the host: each symbolic link on
// the way (/bin, /lib, /lib64 on a merged-/usr system, sh -> dash, the
// loader's own) as a link, each file once, with the directories they
// need. Real tools in an image, built from the host's packages, with no
// registry to reach.
func HostFilesLayer(t testing.TB, paths ...string) []Entry {
	t.Helper()
	need := slices.Clone(paths)
	for _, p := range paths {
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			continue // static, or not ELF: nothing more to bring
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				need = append(need, f)
			}
		}
	}
	var entries []Entry
	seen := map[string]bool{}
	add := func(e Entry) {
		if !seen[e.Name] {
			seen[e.Name] = true
			entries = append(entries, e)
		}
	}
	for _, p := range need {
		// Walk p a component at a time as the kernel would, recording
		// each link and directory met, until it is a file.
		for hops := 0; ; hops++ {
			if hops > 40 {
				t.Fatalf("%s: too many links", p)
			}
			parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
			moved := false
			for i := range parts {
				cur := "/" + strings.Join(parts[:i+1], "/")
				fi, err := os.Lstat(cur)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				name := strings.TrimPrefix(cur, "/")
				switch {
				case fi.Mode()&os.ModeSymlink != 0:
					target, err := os.Readlink(cur)
					if err != nil {
						t.Fatal(err)
					}
					add(Entry{Name: name, Mode: 0o777, Link: target})
					if !filepath.IsAbs(target) {
						target = filepath.Join(filepath.Dir(cur), target)
					}
					p, moved = filepath.Join(append([]string{target}, parts[i+1:]...)...), true
				case fi.IsDir():
					add(Entry{Name: name + "/", Mode: 0o755})
					continue
				default:
					data, err := os.ReadFile(cur)
					if err != nil {
						t.Fatal(err)
					}
					add(Entry{Name: name, Mode: int64(fi.Mode().Perm()), Data: data})
				}
				break
			}
			if !moved {
				break
			}
		}
	}
	return entries
}

// Pull stores refs in the image store dir with sodactl image pull, as a
// user would, failing t if one is not stored.
func Pull(t testing.TB, sodactl, store string, refs ...string) {
	t.Helper()
	for _, ref := range refs {
		if out, err := exec.Command(sodactl, "image", "pull", "--store", store, ref).CombinedOutput(); err != nil {
			t.Fatalf("sodactl image pull %s: %v\n%s", ref, err, out)
		}
	}
}

// Registry serves go-containerregistry's registry on loopback until the
// test ends and returns its host:port.
func Registry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Push pushes img as ref and returns its manifest digest.
func Push(t testing.TB, ref string, img v1.Image) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
