package imagestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxConfigBytes bounds an image's config blob.
const maxConfigBytes = 8 << 20

func hostPlatform() string { return "linux/" + runtime.GOARCH }

// parseRef parses an image reference, letting plain HTTP be tried only
// for a registry on the loopback address.
func parseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	host := r.Context().RegistryStr()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if isLoopback(host) {
		return name.ParseReference(ref, name.Insecure)
	}
	return r, nil
}

// normalize is the name refs.json keeps for ref.
func normalize(ref string) (string, error) {
	r, err := parseRef(ref)
	if err != nil {
		return "", err
	}
	return r.Name(), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guard is the store's transport: plain HTTP only to the loopback
// address, and a request or response body that stalls is cut.
type guard struct {
	base  http.RoundTripper
	stall time.Duration
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !isLoopback(req.URL.Hostname()) {
		return nil, fmt.Errorf("refused %s://%s: plain HTTP is only for a registry on the loopback address", req.URL.Scheme, req.URL.Host)
	}
	ctx, cancel := context.WithCancel(req.Context())
	var stalled atomic.Bool
	timer := time.AfterFunc(g.stall, func() { stalled.Store(true); cancel() })
	resp, err := g.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel()
		if stalled.Load() {
			return nil, &StallError{Host: req.URL.Host, After: g.stall.String()}
		}
		return nil, err
	}
	timer.Stop() // armed again only while a read waits
	resp.Body = &idleBody{rc: resp.Body, timer: timer, stall: g.stall, cancel: cancel, stalled: &stalled, host: req.URL.Host}
	return resp, nil
}

// idleBody fails a read that waits longer than stall for data; time the
// reader spends elsewhere does not count.
type idleBody struct {
	rc      io.ReadCloser
	timer   *time.Timer
	stall   time.Duration
	cancel  context.CancelFunc
	stalled *atomic.Bool
	host    string
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.stall)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && b.stalled.Load() {
		return n, &StallError{Host: b.host, After: b.stall.String()}
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	b.cancel()
	return b.rc.Close()
}

// transport is the store's round tripper to registries: s.opts.Transport
// (or Go's default) behind the guard.
func (s *Store) transport() http.RoundTripper {
	base := s.opts.Transport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &guard{base: base, stall: s.opts.StallTimeout}
}

// blobFetch fetches a blob of an image as it is, for ingest to verify.
type blobFetch func(ctx context.Context, digest v1.Hash) (io.ReadCloser, error)

// rawBlobs fetches repo's blobs without go-containerregistry's digest
// check of each: ingest hashes every byte of a blob itself as it stores
// it (teeBlob), and a second hash of each byte cost a pull a third of its
// CPU time. The token exchange is the registry client's own.
func (s *Store) rawBlobs(ctx context.Context, repo name.Repository) (blobFetch, error) {
	auth, err := authn.Resolve(ctx, s.opts.Keychain, repo)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", repo, err)
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, s.transport(), []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: rt}
	return func(ctx context.Context, d v1.Hash) (io.ReadCloser, error) {
		u := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/blobs/" + d.String()}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", "soda-imagestore")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if err := transport.CheckError(resp, http.StatusOK); err != nil {
			resp.Body.Close()
			return nil, err
		}
		return resp.Body, nil
	}, nil
}

func (s *Store) remoteOptions(ctx context.Context) ([]remote.Option, error) {
	plat, err := v1.ParsePlatform(s.opts.Platform)
	if err != nil {
		return nil, fmt.Errorf("platform %q: %w", s.opts.Platform, err)
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(s.opts.Keychain),
		remote.WithTransport(s.transport()),
		remote.WithPlatform(*plat),
		remote.WithUserAgent("soda-imagestore"),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 2}),
	}, nil
}

// Pull fetches ref (a tag or name@sha256:…; from a manifest list, the
// store's platform) with every blob verified, unpacks it, and records it
// under ref's name. An image already complete is only named again.
func (s *Store) Pull(ctx context.Context, ref string) (*Image, error) {
	r, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	ropts, err := s.remoteOptions(ctx)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	var index string
	if desc.MediaType.IsIndex() {
		index = desc.Digest.String()
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	fetch, err := s.rawBlobs(ctx, r.Context())
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	im, err := s.ingest(ctx, img, fetch, index, []string{r.Name()})
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return im, nil
}

// Import stores the image of path: an OCI layout directory (its one
// image, or the store's platform from its index) or a `docker save`
// archive (its one image).
func (s *Store) Import(ctx context.Context, path string) (*Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	var (
		img   v1.Image
		index string
	)
	if fi.IsDir() {
		idx, err := layout.ImageIndexFromPath(path)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		img, index, err = s.pick(idx, 0)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
	} else {
		if img, err = tarball.ImageFromPath(path, nil); err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
	}
	im, err := s.ingest(ctx, img, nil, index, nil)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	return im, nil
}

// pick chooses the image of an index: its only one, or the one of the
// store's platform.
func (s *Store) pick(idx v1.ImageIndex, depth int) (v1.Image, string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	plat, err := v1.ParsePlatform(s.opts.Platform)
	if err != nil {
		return nil, "", err
	}
	var cands []v1.Descriptor
	for _, d := range im.Manifests {
		if len(im.Manifests) == 1 || d.Platform == nil || d.Platform.Satisfies(*plat) {
			cands = append(cands, d)
		}
	}
	if len(cands) != 1 {
		return nil, "", fmt.Errorf("%d images match platform %s; want one", len(cands), s.opts.Platform)
	}
	d := cands[0]
	if d.MediaType.IsIndex() {
		if depth > 0 {
			return nil, "", errors.New("manifest lists nested more than once")
		}
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, "", err
		}
		img, _, err := s.pick(child, depth+1)
		return img, d.Digest.String(), err
	}
	img, err := idx.Image(d.Digest)
	return img, "", err
}

func layerMediaTypeOK(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerUncompressedLayer:
		return true
	}
	return false
}

// ingest stores img's blobs (verified), unpacks it and records it; its
// layers come from fetch if set, else from img.
func (s *Store) ingest(ctx context.Context, img v1.Image, fetch blobFetch, index string, names []string) (*Image, error) {
	unlock, err := s.lock(ctx, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.recover(); err != nil {
		return nil, err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	mdigest := digestOf(rawManifest)
	mh, _ := hexOf(mdigest)
	if im, err := s.readRecord(mh); err == nil {
		return s.name(im, names)
	}
	manifest, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", mdigest, err)
	}
	mt := manifest.MediaType
	if mt == "" {
		mt, _ = img.MediaType()
	}
	if manifest.Config.Size > maxConfigBytes {
		return nil, fmt.Errorf("config %s: %d bytes, more than %d", manifest.Config.Digest, manifest.Config.Size, maxConfigBytes)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", manifest.Config.Digest, err)
	}
	if got := digestOf(rawConfig); got != manifest.Config.Digest.String() {
		return nil, &DigestMismatchError{What: "config", Want: manifest.Config.Digest.String(), Got: got, WantSize: -1}
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", manifest.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(manifest.Layers) {
		return nil, fmt.Errorf("config %s: %d diff_ids for %d layers", manifest.Config.Digest, len(cfg.RootFS.DiffIDs), len(manifest.Layers))
	}

	stage, err := s.tempDir("pull-")
	if err != nil {
		return nil, err
	}
	defer removeTree(stage)
	staged := map[string]string{} // hex → staged file
	for _, b := range []struct {
		digest string
		data   []byte
	}{{mdigest, rawManifest}, {manifest.Config.Digest.String(), rawConfig}} {
		h, _ := hexOf(b.digest)
		p := filepath.Join(stage, h)
		if err := os.WriteFile(p, b.data, 0o600); err != nil {
			return nil, err
		}
		staged[h] = p
	}
	// A manifest's sizes are the registry's word: bound them before
	// fetching anything (the fetch checks them byte by byte).
	lim := s.opts.Unpack.Limits.withDefaults()
	var total int64
	for _, d := range manifest.Layers {
		total += d.Size
		if d.Size < 0 || d.Size > lim.MaxLayerBytes || total > lim.MaxTotalBytes {
			return nil, fmt.Errorf("layer %s: %d bytes: more than the store takes (%w)", d.Digest, d.Size, ErrImageTooLarge)
		}
	}
	rec := &Image{
		Digest: mdigest, IndexDigest: index, MediaType: string(mt), Config: manifest.Config.Digest.String(),
		Platform: platformOf(cfg), Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
		Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, Stored: time.Now().UTC(),
	}
	// Each layer not in the store yet is fetched and applied in one pass:
	// its bytes go to a staged blob file, through a hash, and on to the
	// unpacker, which meanwhile writes the tree into a directory of its
	// own. The blob's digest and size are checked once its layer is
	// applied (UnpackLayer.Verify), and nothing enters the store until
	// every one of them is: a blob that does not match leaves nothing
	// behind but a staging directory removed on the way out.
	fetched := map[int]int64{} // layer index → size, for the progress events
	var tees []*teeBlob
	defer func() {
		for _, t := range tees {
			t.abort()
		}
	}()
	var layers []UnpackLayer
	for i, d := range manifest.Layers {
		if !layerMediaTypeOK(d.MediaType) {
			return nil, fmt.Errorf("layer %s: media type %q is not a layer soda unpacks", d.Digest, d.MediaType)
		}
		h, ok := hexOf(d.Digest.String())
		if !ok {
			return nil, fmt.Errorf("layer %s: not a sha256 digest", d.Digest)
		}
		rec.Layers = append(rec.Layers, Layer{Digest: d.Digest.String(), DiffID: cfg.RootFS.DiffIDs[i].String(), Size: d.Size, MediaType: string(d.MediaType)})
		ul := UnpackLayer{Digest: d.Digest.String(), DiffID: cfg.RootFS.DiffIDs[i].String()}
		if p := staged[h]; p != "" {
			ul.Open = func() (io.ReadCloser, error) { return os.Open(p) }
		} else if _, err := os.Stat(s.blobPath(h)); err == nil {
			ul.Open = func() (io.ReadCloser, error) { return os.Open(s.blobPath(h)) }
		} else {
			p := filepath.Join(stage, h)
			staged[h] = p
			fetched[i] = d.Size
			t := &teeBlob{path: p, digest: d.Digest.String(), size: d.Size}
			tees = append(tees, t)
			ul.Open = func() (io.ReadCloser, error) {
				var rc io.ReadCloser
				if fetch != nil {
					rc, err = fetch(ctx, d.Digest)
				} else {
					var l v1.Layer
					if l, err = img.LayerByDigest(d.Digest); err == nil {
						rc, err = l.Compressed()
					}
				}
				if err != nil {
					return nil, err
				}
				if err := t.start(rc); err != nil {
					rc.Close()
					return nil, err
				}
				return t, nil
			}
			ul.Verify = t.finish
		}
		layers = append(layers, ul)
	}

	unpackDir, err := s.tempDir("unpack-")
	if err != nil {
		return nil, err
	}
	defer removeTree(unpackDir)
	uo := s.opts.Unpack
	if !uo.Chown {
		uo.Chown = os.Geteuid() == 0
	}
	if uo.Progress == nil {
		uo.Progress = s.opts.Progress
	}
	if progress := uo.Progress; progress != nil {
		uo.Progress = func(e Event) {
			if size, ok := fetched[e.Index]; ok && e.Kind == EventUnpack {
				progress(Event{Kind: EventFetch, Digest: e.Digest, Index: e.Index, Count: e.Count, Size: size})
			}
			progress(e)
		}
	}
	if _, err := Unpack(ctx, unpackDir, layers, uo); err != nil {
		// A blob that is not what the manifest says fails the unpack
		// first, as a tar or decompression error: name the cause, if
		// little of it is left to read. A refused entry is the image's
		// own content, as the manifest says or not: nothing more is
		// fetched for it.
		var ee *EntryError
		if errors.As(err, &ee) || ctx.Err() != nil {
			return nil, err
		}
		for _, t := range tees {
			var dm *DigestMismatchError
			if t.rc != nil && t.size-t.n <= maxDiagnosisBytes && errors.As(t.finish(), &dm) {
				return nil, dm
			}
		}
		return nil, err
	}
	// Every blob is verified: only now does any enter the store.
	for h, p := range staged {
		if err := os.Rename(p, s.blobPath(h)); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(unpackDir, s.rootfsPath(mh)); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	// The record is the completion marker: written last.
	if err := s.writeFileAtomic(s.recordPath(mh), b); err != nil {
		return nil, err
	}
	if s.opts.Progress != nil {
		s.opts.Progress(Event{Kind: EventStored, Digest: mdigest, Count: len(rec.Layers)})
	}
	rec.Rootfs = s.rootfsPath(mh)
	return s.name(rec, names)
}

// name records names for im (a tag moves to it).
func (s *Store) name(im *Image, names []string) (*Image, error) {
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		refs[n] = im.Digest
	}
	if len(names) > 0 {
		if err := s.writeRefs(refs); err != nil {
			return nil, err
		}
	}
	im.Names = namesOf(refs, im.Digest)
	return im, nil
}

func platformOf(cfg *v1.ConfigFile) string {
	p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	return p.String()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// maxDiagnosisBytes bounds what ingest still fetches of a blob whose
// unpack failed, to tell a blob that is not what its manifest says from
// a malformed one.
const maxDiagnosisBytes = 64 << 20

// teeBlob is a layer's compressed stream as it is fetched: what the
// unpacker reads of it is written to the staged blob file path and hashed
// on the way. finish reads what the unpacker left (a stream's padding),
// and refuses a content that does not hash to digest or has not size
// bytes; the file is then removed.
type teeBlob struct {
	path, digest string
	size         int64

	rc  io.ReadCloser // the fetch
	r   io.Reader     // rc, bounded to size+1 bytes
	f   *os.File      // written through: the unpacker reads 64 KiB at a time
	h   hash.Hash
	n   int64
	err error // the first write error
}

// start begins the fetch rc.
func (t *teeBlob) start(rc io.ReadCloser) error {
	if t.rc != nil {
		return fmt.Errorf("layer %s: opened twice", t.digest)
	}
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	t.rc, t.r, t.f, t.h = rc, io.LimitReader(rc, t.size+1), f, sha256.New()
	return nil
}

func (t *teeBlob) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	n, err := t.r.Read(p)
	if n > 0 {
		t.h.Write(p[:n])
		t.n += int64(n)
		if _, werr := t.f.Write(p[:n]); werr != nil {
			t.err = fmt.Errorf("layer %s: store the blob: %w", t.digest, werr)
			return n, t.err
		}
	}
	var se *StallError
	if err != nil && errors.As(err, &se) {
		return n, fmt.Errorf("layer %s: %w", t.digest, se)
	}
	return n, err
}

// Close is the unpacker's: the fetch stays open for finish.
func (t *teeBlob) Close() error { return nil }

// finish drains the fetch, closes the blob file and checks what came.
func (t *teeBlob) finish() error {
	if t.rc == nil {
		return fmt.Errorf("layer %s: never fetched", t.digest)
	}
	_, rerr := io.Copy(io.Discard, t)
	if rerr == nil {
		rerr = t.err
	}
	if cerr := t.f.Close(); rerr == nil {
		rerr = cerr
	}
	t.rc.Close()
	t.f, t.rc = nil, nil
	got := "sha256:" + hex.EncodeToString(t.h.Sum(nil))
	if got != t.digest || t.n != t.size {
		os.Remove(t.path)
		return &DigestMismatchError{What: "layer", Want: t.digest, Got: got, WantSize: t.size, GotSize: t.n, Err: rerr}
	}
	if rerr != nil {
		os.Remove(t.path)
		return fmt.Errorf("layer %s: %w", t.digest, rerr)
	}
	return nil
}

// abort closes what finish did not (an unpack that failed first).
func (t *teeBlob) abort() {
	if t.f != nil {
		t.f.Close()
	}
	if t.rc != nil {
		t.rc.Close()
	}
}
