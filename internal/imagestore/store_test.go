package imagestore

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// testImage builds an image of arch from gzip layers.
func testImage(t testing.TB, arch string, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env = []string{"PATH=/bin"}
	cf.Config.WorkingDir = "/work"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// baseImage: a few files, var/run -> /run and a file written through it,
// a whiteout in the second layer.
func baseImage(t testing.TB, arch string) v1.Image {
	l1 := gzLayer(t, dir("run/"), dir("var/"), symlink("var/run", "/run"), dir("etc/"), file("etc/os-release", "ID=soda-test\n"),
		file("etc/gone", "x"), file("arch", arch))
	l2 := gzLayer(t, file("var/run/pid", "1"), file("etc/.wh.gone", ""))
	return testImage(t, arch, l1, l2)
}

// startRegistry serves go-containerregistry's registry on loopback,
// through wrap if given; it returns host:port.
func startRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t testing.TB, ref string, img v1.Image, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatal(err)
	}
}

func openStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func digestOfImage(t testing.TB, img v1.Image) string {
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// entriesOf lists a store subdirectory.
func entriesOf(t *testing.T, s *Store, sub string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Dir(), sub))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// holdsNothing checks that no blob, image, unpack or name is stored.
func holdsNothing(t *testing.T, s *Store) {
	t.Helper()
	for _, sub := range []string{"blobs/sha256", "images", "rootfs", "tmp"} {
		if e := entriesOf(t, s, sub); len(e) > 0 {
			t.Errorf("%s holds %v", sub, e)
		}
	}
	if refs, _ := s.refs(); len(refs) > 0 {
		t.Errorf("names %v", refs)
	}
}

func checkRootfs(t *testing.T, im *Image, arch string) {
	t.Helper()
	for p, want := range map[string]string{"etc/os-release": "ID=soda-test\n", "run/pid": "1", "arch": arch} {
		if b, err := os.ReadFile(filepath.Join(im.Rootfs, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(im.Rootfs, "etc/gone")); err == nil {
		t.Error("etc/gone is not whited out")
	}
}

func TestPullByTagAndDigest(t *testing.T) {
	host := startRegistry(t, nil)
	img := baseImage(t, runtime.GOARCH)
	push(t, host+"/test/base:v1", img)
	want := digestOfImage(t, img)

	var events []Event
	var mu sync.Mutex
	s := openStore(t, Options{Progress: func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	ctx := context.Background()
	im, err := s.Pull(ctx, host+"/test/base:v1")
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != want || len(im.Layers) != 2 || im.WorkingDir != "/work" || !slices.Equal(im.Env, []string{"PATH=/bin"}) {
		t.Errorf("image %+v; want digest %s", im, want)
	}
	checkRootfs(t, im, runtime.GOARCH)
	kinds := map[EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	if kinds[EventFetch] != 2 || kinds[EventUnpack] != 2 || kinds[EventStored] != 1 {
		t.Errorf("events %v", events)
	}

	// By digest: the same image, named once more, not fetched again.
	byDigest := host + "/test/base@" + want
	im2, err := s.Pull(ctx, byDigest)
	if err != nil {
		t.Fatal(err)
	}
	if im2.Digest != want || len(im2.Names) != 2 {
		t.Errorf("by digest: %s names %v", im2.Digest, im2.Names)
	}
	for _, ref := range []string{host + "/test/base:v1", byDigest, want} {
		got, err := s.Inspect(ctx, ref)
		if err != nil || got.Digest != want {
			t.Errorf("Inspect(%s): %v, %v", ref, got, err)
		}
	}
	if _, err := s.Inspect(ctx, host+"/test/base:v2"); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("Inspect of an unknown tag: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Digest != want {
		t.Errorf("List: %v, %v", list, err)
	}

	// A tag that moves: the new image gets the name; the old one keeps
	// its digest name.
	img2 := testImage(t, runtime.GOARCH, gzLayer(t, file("v2", "2")))
	push(t, host+"/test/base:v1", img2)
	im3, err := s.Pull(ctx, host+"/test/base:v1")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := s.Inspect(ctx, want)
	if im3.Digest == want || !slices.Contains(im3.Names, host+"/test/base:v1") || slices.Contains(old.Names, host+"/test/base:v1") {
		t.Errorf("tag did not move: new %v, old %v", im3.Names, old.Names)
	}
	if _, err := s.Pull(ctx, host+"/test/base@"+digestOfImage(t, baseImage(t, "s390x"))); err == nil {
		t.Error("a digest the registry lacks was pulled")
	}
}

func TestPullAuth(t *testing.T) {
	const user, pass = "soda", "s3cret"
	host := startRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="soda-test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img := baseImage(t, runtime.GOARCH)
	push(t, host+"/private/img:v1", img, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))

	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	ctx := context.Background()
	for _, file := range []string{".docker/config.json", "run/containers/auth.json"} {
		t.Run(file, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			t.Setenv("DOCKER_CONFIG", filepath.Join(home, ".docker"))
			t.Setenv("XDG_RUNTIME_DIR", filepath.Join(home, "run"))
			t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
			t.Setenv("REGISTRY_AUTH_FILE", "")
			if _, err := openStore(t, Options{}).Pull(ctx, host+"/private/img:v1"); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
				t.Fatalf("pull without credentials: %v", err)
			}
			p := filepath.Join(home, file)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			im, err := openStore(t, Options{}).Pull(ctx, host+"/private/img:v1")
			if err != nil {
				t.Fatal(err)
			}
			checkRootfs(t, im, runtime.GOARCH)
		})
	}
}

func TestPullManifestList(t *testing.T) {
	host := startRegistry(t, nil)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mine, theirs := baseImage(t, runtime.GOARCH), baseImage(t, other)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: theirs, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	r, _ := name.ParseReference(host + "/test/multi:v1")
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	idxDigest, _ := idx.Digest()
	for _, tt := range []struct {
		platform string
		img      v1.Image
		arch     string
	}{{"", mine, runtime.GOARCH}, {"linux/" + other, theirs, other}} {
		im, err := openStore(t, Options{Platform: tt.platform}).Pull(context.Background(), host+"/test/multi:v1")
		if err != nil {
			t.Fatal(err)
		}
		if im.Digest != digestOfImage(t, tt.img) || im.IndexDigest != idxDigest.String() || im.Platform != "linux/"+tt.arch {
			t.Errorf("platform %q: got %s (%s) from %s", tt.platform, im.Digest, im.Platform, im.IndexDigest)
		}
		checkRootfs(t, im, tt.arch)
	}
	if _, err := openStore(t, Options{Platform: "linux/riscv64"}).Pull(context.Background(), host+"/test/multi:v1"); err == nil {
		t.Error("a platform the list lacks was pulled")
	}
}

// blobHandler serves the blob digest through do, the rest as h would.
func blobHandler(h http.Handler, digest string, do func(w http.ResponseWriter, r *http.Request, body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		do(w, r, rec.Body.Bytes())
	})
}

func TestPullCorruptBlob(t *testing.T) {
	img := baseImage(t, runtime.GOARCH)
	layers, _ := img.Layers()
	ld, _ := layers[1].Digest()
	host := startRegistry(t, func(h http.Handler) http.Handler {
		return blobHandler(h, ld.String(), func(w http.ResponseWriter, r *http.Request, body []byte) {
			body = bytes.Clone(body)
			body[len(body)/2] ^= 0xff
			w.Write(body)
		})
	})
	push(t, host+"/test/bad:v1", img)
	s := openStore(t, Options{})
	_, err := s.Pull(context.Background(), host+"/test/bad:v1")
	var dm *DigestMismatchError
	if !errors.As(err, &dm) || dm.Want != ld.String() {
		t.Fatalf("err %v, want a digest mismatch of %s", err, ld)
	}
	holdsNothing(t, s)
}

// TestPullRefusedEntryStopsFetch: a layer refused at its first entry
// ends the fetch there: the rest of a big blob (32 MiB of noise, not
// compressible) is not downloaded to tell anything more.
func TestPullRefusedEntryStopsFetch(t *testing.T) {
	noise := make([]byte, 32<<20)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	img := testImage(t, runtime.GOARCH, gzLayer(t, file("../escape", "x"), file("big", string(noise))))
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	size, _ := layers[0].Size()
	var sent atomic.Int64
	host := startRegistry(t, func(h http.Handler) http.Handler {
		return blobHandler(h, ld.String(), func(w http.ResponseWriter, r *http.Request, body []byte) {
			for off := 0; off < len(body); off += 64 << 10 {
				n, err := w.Write(body[off:min(off+64<<10, len(body))])
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
	})
	push(t, host+"/test/refused:v1", img)
	s := openStore(t, Options{})
	_, err := s.Pull(context.Background(), host+"/test/refused:v1")
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Entry != "../escape" {
		t.Fatalf("err %v, want the entry ../escape refused", err)
	}
	if got := sent.Load(); got > size/2 {
		t.Errorf("the registry sent %d of the blob's %d bytes after its first entry was refused", got, size)
	}
	holdsNothing(t, s)
}

func TestPullStall(t *testing.T) {
	img := baseImage(t, runtime.GOARCH)
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	for _, tt := range []struct {
		name string
		wrap func(h http.Handler, release chan struct{}) http.Handler
	}{
		{"no answer", func(h http.Handler, release chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
		}},
		{"a blob that stops midway", func(h http.Handler, release chan struct{}) http.Handler {
			return blobHandler(h, ld.String(), func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Write(body[:len(body)/2])
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stalling atomic.Bool
			release := make(chan struct{})
			host := startRegistry(t, func(h http.Handler) http.Handler {
				stalled := tt.wrap(h, release)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if stalling.Load() {
						stalled.ServeHTTP(w, r)
						return
					}
					h.ServeHTTP(w, r)
				})
			})
			t.Cleanup(func() { close(release) })
			push(t, host+"/test/slow:v1", img)
			stalling.Store(true)
			s := openStore(t, Options{StallTimeout: 300 * time.Millisecond})
			start := time.Now()
			_, err := s.Pull(context.Background(), host+"/test/slow:v1")
			var se *StallError
			if !errors.As(err, &se) {
				t.Fatalf("err %v, want a StallError", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			holdsNothing(t, s)
		})
	}
}

// recordingTransport records the URLs asked of it and fails them all.
type recordingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.String())
	r.mu.Unlock()
	return nil, errors.New("no network in tests")
}

func TestPlainHTTPOnlyLoopback(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:5000/v2/", true}, {"http://127.0.0.53/v2/", true}, {"http://[::1]:5000/v2/", true}, {"http://localhost:5000/v2/", true},
		{"https://10.0.0.1/v2/", true}, {"https://registry.example/v2/", true},
		{"http://10.0.0.1:5000/v2/", false}, {"http://192.168.1.2/v2/", false}, {"http://172.16.0.1/v2/", false},
		{"http://registry.localhost:5000/v2/", false}, {"http://registry.example/v2/", false},
	} {
		rec := &recordingTransport{}
		g := &guard{base: rec, stall: time.Second}
		req, _ := http.NewRequest(http.MethodGet, tt.url, nil)
		_, err := g.RoundTrip(req)
		if reached := len(rec.urls) > 0; reached != tt.ok {
			t.Errorf("%s: reached the network %v, want %v (%v)", tt.url, reached, tt.ok, err)
		}
	}
	// A pull from a private address never tries plain HTTP, where
	// go-containerregistry would fall back to it.
	for _, ref := range []string{"10.1.2.3:5000/x/y:z", "192.168.0.7/x:z", "registry.localhost:5000/x:z"} {
		rec := &recordingTransport{}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := openStore(t, Options{Transport: rec}).Pull(ctx, ref)
		cancel()
		if err == nil {
			t.Fatalf("%s: pulled", ref)
		}
		for _, u := range rec.urls {
			if !strings.HasPrefix(u, "https://") {
				t.Errorf("%s: asked %s", ref, u)
			}
		}
		if len(rec.urls) == 0 {
			t.Errorf("%s: HTTPS not tried", ref)
		}
	}
}

func TestImport(t *testing.T) {
	img := baseImage(t, runtime.GOARCH)
	ctx := context.Background()
	t.Run("OCI layout", func(t *testing.T) {
		dir := t.TempDir()
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		im, err := openStore(t, Options{}).Import(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		if im.Digest != digestOfImage(t, img) {
			t.Errorf("digest %s, want %s", im.Digest, digestOfImage(t, img))
		}
		checkRootfs(t, im, runtime.GOARCH)
	})
	t.Run("docker save", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "img.tar")
		tag, _ := name.NewTag("soda.test/base:v1")
		if err := tarball.WriteToFile(f, tag, img); err != nil {
			t.Fatal(err)
		}
		s := openStore(t, Options{})
		im, err := s.Import(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		checkRootfs(t, im, runtime.GOARCH)
		if list, _ := s.List(ctx); len(list) != 1 {
			t.Errorf("list %v", list)
		}
	})
	t.Run("not an image", func(t *testing.T) {
		if _, err := openStore(t, Options{}).Import(ctx, t.TempDir()); err == nil {
			t.Error("imported an empty directory")
		}
	})
}

func TestRemovePruneLease(t *testing.T) {
	host := startRegistry(t, nil)
	a, b := baseImage(t, runtime.GOARCH), testImage(t, runtime.GOARCH, gzLayer(t, file("b", "b")))
	push(t, host+"/test/a:v1", a)
	push(t, host+"/test/b:v1", b)
	ctx := context.Background()
	s := openStore(t, Options{})
	ima, err := s.Pull(ctx, host+"/test/a:v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(ctx, host+"/test/a@"+ima.Digest); err != nil { // a second name
		t.Fatal(err)
	}
	imb, err := s.Pull(ctx, host+"/test/b:v1")
	if err != nil {
		t.Fatal(err)
	}
	// Named images survive a plain prune.
	if rep, err := s.Prune(ctx, PruneOptions{}); err != nil || len(rep.Images) != 0 {
		t.Fatalf("prune: %v, %v", rep, err)
	}
	release, err := s.Lease(ctx, ima.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, ima.Digest); !errors.As(err, new(*InUseError)) {
		t.Fatalf("remove of a leased image: %v", err)
	}
	rep, err := s.Prune(ctx, PruneOptions{All: true, InUse: func(d string) bool { return false }})
	if err != nil || !slices.Equal(rep.Images, []string{imb.Digest}) || rep.Blobs == 0 {
		t.Fatalf("prune: %+v, %v", rep, err)
	}
	if _, err := os.Stat(imb.Rootfs); err == nil {
		t.Error("b's rootfs survived")
	}
	if _, err := s.Inspect(ctx, ima.Digest); err != nil {
		t.Errorf("leased a went: %v", err)
	}
	// InUse holds one too.
	if rep, _ := s.Prune(ctx, PruneOptions{All: true, InUse: func(d string) bool { return d == ima.Digest }}); len(rep.Images) != 0 {
		t.Errorf("pruned %v in use", rep.Images)
	}
	release()
	// Removing by name removes the image once no name is left.
	if err := s.Remove(ctx, host+"/test/a:v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inspect(ctx, ima.Digest); err != nil {
		t.Fatalf("a went with one of its two names: %v", err)
	}
	if err := s.Remove(ctx, host+"/test/a@"+ima.Digest); err != nil {
		t.Fatal(err)
	}
	holdsNothing(t, s)
	if err := s.Remove(ctx, ima.Digest); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("remove of a removed image: %v", err)
	}
}

func TestLeaseOfDeadHolder(t *testing.T) {
	host := startRegistry(t, nil)
	push(t, host+"/test/a:v1", baseImage(t, runtime.GOARCH))
	s := openStore(t, Options{})
	im, err := s.Pull(context.Background(), host+"/test/a:v1")
	if err != nil {
		t.Fatal(err)
	}
	// A lease file nobody holds: what a killed holder leaves.
	h, _ := hexOf(im.Digest)
	if err := os.MkdirAll(filepath.Join(s.Dir(), "leases", h), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "leases", h, "lease-dead"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(context.Background(), im.Digest); err != nil {
		t.Fatalf("a dead holder's lease kept the image: %v", err)
	}
}

func TestRecoveryOnOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "rootfs", strings.Repeat("a", 64))
	for _, d := range []string{filepath.Join(dir, "tmp", "pull-x", "sub"), filepath.Join(dir, "tmp", "unpack-y", "ro"), orphan} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "tmp", "pull-x", "partial"), []byte("half"), 0o600)
	os.Chmod(filepath.Join(dir, "tmp", "unpack-y", "ro"), 0o555)
	os.Chmod(filepath.Join(dir, "tmp", "unpack-y"), 0o555)
	if _, err := Open(context.Background(), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	holdsNothing(t, s)
}

func TestDefaultDir(t *testing.T) {
	for _, tt := range []struct {
		uid  int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"XDG_DATA_HOME": "/x"}, "/var/lib/soda/images"},
		{1000, map[string]string{"XDG_DATA_HOME": "/home/u/data", "HOME": "/home/u"}, "/home/u/data/soda/images"},
		{1000, map[string]string{"HOME": "/home/u"}, "/home/u/.local/share/soda/images"},
		{1000, map[string]string{"XDG_DATA_HOME": "rel", "HOME": "/home/u"}, "/home/u/.local/share/soda/images"},
		{1000, map[string]string{}, ""},
	} {
		got, err := DefaultDir(tt.uid, func(k string) string { return tt.env[k] })
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("DefaultDir(%d, %v) = %q, %v; want %q", tt.uid, tt.env, got, err, tt.want)
		}
	}
}

// TestMain runs the tests, or, re-executed by a test with
// SODA_IMAGESTORE_HELPER set, that helper instead (helperProcess).
func TestMain(m *testing.M) {
	if mode := os.Getenv("SODA_IMAGESTORE_HELPER"); mode != "" {
		helperProcess(mode)
	}
	os.Exit(m.Run())
}

// helperProcess is the pull that TestKill9 kills (mode pull or unpack),
// or the store used as another user (mode user); it exits.
func helperProcess(mode string) {
	if mode == "user" {
		if err := userHelper(); err != nil {
			fmt.Println("USER FAILED", err)
		} else {
			fmt.Println("USER OK")
		}
		os.Exit(0)
	}
	opts := Options{StallTimeout: time.Minute}
	if mode == "unpack" {
		opts.Unpack.afterEntry = func(n int64) {
			if n == 5 {
				fmt.Println("UNPACKING")
				time.Sleep(time.Hour)
			}
		}
	}
	s, err := Open(context.Background(), os.Getenv("SODA_STORE"), opts)
	if err == nil {
		_, err = s.Pull(context.Background(), os.Getenv("SODA_REF"))
	}
	fmt.Println("DONE", err)
	os.Exit(0)
}

func TestKill9(t *testing.T) {
	var entries []entry
	for i := range 40 {
		entries = append(entries, file("f"+strconv.Itoa(i), strings.Repeat("x", 100)))
	}
	img := testImage(t, runtime.GOARCH, gzLayer(t, entries...))
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	lh, _ := hexOf(ld.String())
	for _, mode := range []string{"pull", "unpack"} {
		t.Run(mode, func(t *testing.T) {
			var stall atomic.Bool
			halfSent := make(chan struct{}, 1)
			host := startRegistry(t, func(h http.Handler) http.Handler {
				return blobHandler(h, ld.String(), func(w http.ResponseWriter, r *http.Request, body []byte) {
					if !stall.Load() {
						w.Write(body)
						return
					}
					w.Write(body[:len(body)/2])
					w.(http.Flusher).Flush()
					halfSent <- struct{}{}
					<-r.Context().Done()
				})
			})
			ref := host + "/test/kill:v1"
			push(t, ref, img)
			stall.Store(mode == "pull")
			dir := filepath.Join(t.TempDir(), "store")

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "SODA_IMAGESTORE_HELPER="+mode, "SODA_STORE="+dir, "SODA_REF="+ref)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 10)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			deadline := time.After(30 * time.Second)
			if mode == "pull" {
				select {
				case <-halfSent:
				case l := <-lines:
					t.Fatalf("helper: %s", l)
				case <-deadline:
					t.Fatal("the helper did not fetch the layer")
				}
				// Wait until the half is on disk in tmp/.
				for wait := time.Now().Add(30 * time.Second); ; {
					if time.Now().After(wait) {
						t.Fatal("the half-sent layer did not reach tmp/ in 30 s")
					}
					m, _ := filepath.Glob(filepath.Join(dir, "tmp", "pull-*", lh))
					if len(m) > 0 {
						if fi, err := os.Stat(m[0]); err == nil && fi.Size() > 0 {
							break
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else {
				select {
				case l := <-lines:
					if l != "UNPACKING" {
						t.Fatalf("helper: %s", l)
					}
				case <-deadline:
					t.Fatal("the helper did not unpack")
				}
			}
			cmd.Process.Kill() // SIGKILL
			cmd.Wait()

			tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
			if len(tmp) == 0 {
				t.Fatal("the killed helper left nothing half-written: the test proves nothing")
			}
			stall.Store(false)
			s, err := Open(context.Background(), dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"tmp", "images", "rootfs"} {
				if e := entriesOf(t, s, sub); len(e) > 0 {
					t.Errorf("after recovery, %s holds %v", sub, e)
				}
			}
			if _, err := s.Inspect(context.Background(), ref); err == nil {
				t.Error("the killed pull's image is listed")
			}
			im, err := s.Pull(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(im.Rootfs, "f39")); err != nil || len(b) != 100 {
				t.Errorf("f39: %d bytes, %v", len(b), err)
			}
		})
	}
}

func TestConcurrentPulls(t *testing.T) {
	host := startRegistry(t, nil)
	img := baseImage(t, runtime.GOARCH)
	push(t, host+"/test/c:v1", img)
	dir := filepath.Join(t.TempDir(), "store")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			// Each its own Store, as separate processes would have.
			s, err := Open(context.Background(), dir, Options{})
			if err == nil {
				_, err = s.Pull(context.Background(), host+"/test/c:v1")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := openStore(t, Options{})
	s.dir = dir
	list, err := s.List(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("list %v, %v", list, err)
	}
	checkRootfs(t, list[0], runtime.GOARCH)
}

func TestPullSizeBound(t *testing.T) {
	host := startRegistry(t, nil)
	push(t, host+"/test/big:v1", baseImage(t, runtime.GOARCH))
	s := openStore(t, Options{Unpack: UnpackOptions{Limits: Limits{MaxLayerBytes: 16}}})
	if _, err := s.Pull(context.Background(), host+"/test/big:v1"); !errors.Is(err, ErrImageTooLarge) {
		t.Fatalf("err %v, want ErrImageTooLarge", err)
	}
	holdsNothing(t, s)
}

// TestAsUser: a user's store, imported and removed by an unprivileged
// process: files are the user's, an image's 0555 directory is kept as
// such and still removed.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as nobody")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "soda-imagestore-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "imagestore.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	img := testImage(t, runtime.GOARCH, gzLayer(t,
		entry{name: "ro/", typ: tar.TypeDir, mode: 0o555}, entry{name: "ro/f", typ: tar.TypeReg, body: "f", mode: 0o4755}))
	lay := filepath.Join(base, "layout")
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(lay, func(p string, d fs.DirEntry, err error) error { return os.Chmod(p, 0o755) })
	store := filepath.Join(base, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(store, nobody, nobody)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SODA_IMAGESTORE_HELPER=user", "SODA_STORE="+store, "SODA_LAYOUT="+lay, "HOME="+base)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "USER OK") {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
}

// userHelper is TestAsUser's unprivileged side.
func userHelper() error {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv("SODA_STORE"), Options{})
	if err != nil {
		return err
	}
	im, err := s.Import(ctx, os.Getenv("SODA_LAYOUT"))
	if err != nil {
		return err
	}
	for p, mode := range map[string]fs.FileMode{"ro": fs.ModeDir | 0o555, "ro/f": 0o755} {
		fi, err := os.Lstat(filepath.Join(im.Rootfs, p))
		if err != nil {
			return err
		}
		if uid, _ := owner(fi); uid != os.Getuid() || fi.Mode() != mode {
			return fmt.Errorf("%s: owner %d mode %v, want %d %v", p, uid, fi.Mode(), os.Getuid(), mode)
		}
	}
	if err := s.Remove(ctx, im.Digest); err != nil {
		return err
	}
	if _, err := os.Stat(im.Rootfs); err == nil {
		return errors.New("the rootfs survived")
	}
	return nil
}

func TestOpenRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "alone") {
		t.Errorf("a world-writable store: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if _, err := Open(context.Background(), link, Options{}); err == nil {
		t.Error("a store through a symbolic link was opened")
	}
	if _, err := Open(context.Background(), "rel/store", Options{}); err == nil {
		t.Error("a relative store was opened")
	}
}
