package imagestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sys/unix"
)

// SystemDir is root's store.
const SystemDir = "/var/lib/soda/images"

// DefaultDir is the store of the user uid: SystemDir for root, else
// soda/images in $XDG_DATA_HOME ($HOME/.local/share without it). getenv
// looks the variables up (os.Getenv, or a test's stand-in).
func DefaultDir(uid int, getenv func(string) string) (string, error) {
	if uid == 0 {
		return SystemDir, nil
	}
	if d := getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "soda", "images"), nil
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "share", "soda", "images"), nil
	}
	return "", errors.New("image store: neither $XDG_DATA_HOME nor $HOME is an absolute path")
}

// Options configure a Store. Zero values take defaults.
type Options struct {
	// Keychain finds registry credentials (default authn.DefaultKeychain).
	Keychain authn.Keychain
	// Transport is the HTTP transport under the store's checks (default
	// a clone of http.DefaultTransport: system roots, proxies).
	Transport http.RoundTripper
	// StallTimeout fails a pull when a registry sends nothing for this
	// long (default 30s).
	StallTimeout time.Duration
	// Platform picks from a manifest list (default linux and the
	// host's architecture).
	Platform string
	// Unpack configures unpacking; Chown defaults to whether the store is
	// run as root (os.Geteuid() == 0).
	Unpack UnpackOptions
	// Progress, if set, is told of fetches and unpacks.
	Progress func(Event)
}

// Store is an image store in one directory. Its methods may be called
// from many goroutines and processes; the store's flock orders them.
type Store struct {
	dir  string
	opts Options
}

// Open opens (making if needed) the store in dir and removes what a
// killed pull or unpack left.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("image store %s: not an absolute path", dir)
	}
	if opts.Keychain == nil {
		opts.Keychain = authn.DefaultKeychain
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 30 * time.Second
	}
	if opts.Platform == "" {
		opts.Platform = hostPlatform()
	}
	s := &Store{dir: dir, opts: opts}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	// Whoever else could write the store could put an image's root in
	// it: it must be the caller's alone.
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("image store %s: not a directory of uid %d writable by it alone", dir, os.Geteuid())
	}
	for _, d := range []string{"blobs/sha256", "images", "rootfs", "leases", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	unlock, err := s.lock(ctx, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.recover(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// lock takes the store's flock, exclusive or shared, waiting for it as
// long as ctx allows.
func (s *Store) lock(ctx context.Context, exclusive bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("image store: lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("image store: waiting for its lock: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// recover removes what a killed writer left: everything in tmp/, and
// every rootfs/HEX without its record. Called with the exclusive lock.
func (s *Store) recover() error {
	tmp := filepath.Join(s.dir, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("image store: recovery: %w", err)
	}
	for _, e := range ents {
		if err := removeTree(filepath.Join(tmp, e.Name())); err != nil {
			return fmt.Errorf("image store: recovery: %w", err)
		}
	}
	rootfs, err := os.ReadDir(filepath.Join(s.dir, "rootfs"))
	if err != nil {
		return fmt.Errorf("image store: recovery: %w", err)
	}
	for _, e := range rootfs {
		if _, err := os.Stat(s.recordPath(e.Name())); errors.Is(err, fs.ErrNotExist) {
			if err := removeTree(filepath.Join(s.dir, "rootfs", e.Name())); err != nil {
				return fmt.Errorf("image store: recovery: %w", err)
			}
		}
	}
	return nil
}

// tempDir makes a fresh directory in tmp/.
func (s *Store) tempDir(prefix string) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := filepath.Join(s.dir, "tmp", prefix+hex.EncodeToString(b[:]))
	return d, os.Mkdir(d, 0o700)
}

// Image is the record of a complete image.
type Image struct {
	Digest      string    `json:"digest"`          // the manifest's, sha256:…
	IndexDigest string    `json:"index,omitempty"` // the manifest list it was picked from
	MediaType   string    `json:"mediaType"`       // the manifest's
	Config      string    `json:"config"`          // the config blob's digest
	Platform    string    `json:"platform"`        // os/arch[/variant]
	Layers      []Layer   `json:"layers"`          // bottom first
	Env         []string  `json:"env,omitempty"`   // from the config
	WorkingDir  string    `json:"workingDir,omitempty"`
	User        string    `json:"user,omitempty"`
	Entrypoint  []string  `json:"entrypoint,omitempty"`
	Cmd         []string  `json:"cmd,omitempty"`
	Stored      time.Time `json:"stored"`
	Names       []string  `json:"-"` // the names resolving to it (from refs.json)
	Rootfs      string    `json:"-"` // the unpacked root, read-only to its users
}

// Layer is one layer of an Image.
type Layer struct {
	Digest    string `json:"digest"`    // the compressed blob's
	DiffID    string `json:"diffID"`    // the uncompressed tar stream's (config rootfs.diff_ids)
	Size      int64  `json:"size"`      // the compressed blob's
	MediaType string `json:"mediaType"` // gzip, zstd or plain tar, Docker or OCI
}

// Size is the image's compressed size.
func (im *Image) Size() int64 {
	var n int64
	for _, l := range im.Layers {
		n += l.Size
	}
	return n
}

func hexOf(digest string) (string, bool) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", false
	}
	return h, true
}

func (s *Store) recordPath(h string) string { return filepath.Join(s.dir, "images", h+".json") }
func (s *Store) rootfsPath(h string) string { return filepath.Join(s.dir, "rootfs", h) }
func (s *Store) blobPath(h string) string   { return filepath.Join(s.dir, "blobs", "sha256", h) }

func (s *Store) readRecord(h string) (*Image, error) {
	b, err := os.ReadFile(s.recordPath(h))
	if err != nil {
		return nil, err
	}
	var im Image
	if err := json.Unmarshal(b, &im); err != nil {
		return nil, fmt.Errorf("image store: record %s: %w", h, err)
	}
	im.Rootfs = s.rootfsPath(h)
	return &im, nil
}

// writeFileAtomic writes b to name through a temporary file in tmp/.
func (s *Store) writeFileAtomic(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "write-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// refs reads refs.json: name → manifest digest.
func (s *Store) refs() (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "refs.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("image store: refs.json: %w", err)
	}
	return m, nil
}

func (s *Store) writeRefs(m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return s.writeFileAtomic(filepath.Join(s.dir, "refs.json"), b)
}

// List returns the complete images, by digest, with their names.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	unlock, err := s.lock(ctx, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.list()
}

func (s *Store) list() ([]*Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "images"))
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	var out []*Image
	for _, e := range ents {
		h, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		im, err := s.readRecord(h)
		if err != nil {
			return nil, err
		}
		im.Names = namesOf(refs, im.Digest)
		out = append(out, im)
	}
	slices.SortFunc(out, func(a, b *Image) int { return strings.Compare(a.Digest, b.Digest) })
	return out, nil
}

func namesOf(refs map[string]string, digest string) []string {
	var names []string
	for n, d := range refs {
		if d == digest {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Inspect returns the image ref names: a manifest digest (sha256:…), a
// name@sha256:… (its digest), or a name the store recorded at a pull.
func (s *Store) Inspect(ctx context.Context, ref string) (*Image, error) {
	unlock, err := s.lock(ctx, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	h, err := s.resolve(refs, ref)
	if err != nil {
		return nil, err
	}
	im, err := s.readRecord(h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Ref: ref}
	}
	if err != nil {
		return nil, err
	}
	im.Names = namesOf(refs, im.Digest)
	return im, nil
}

// resolve turns ref into a manifest HEX the store has a record of.
func (s *Store) resolve(refs map[string]string, ref string) (string, error) {
	digest := ref
	if _, d, ok := strings.Cut(ref, "@"); ok {
		digest = d
	}
	if h, ok := hexOf(digest); ok {
		if _, err := os.Stat(s.recordPath(h)); err == nil {
			return h, nil
		}
		// A manifest list's digest, or a name@digest we recorded.
		if d, ok := refs[ref]; ok {
			if h, ok := hexOf(d); ok {
				return h, nil
			}
		}
		for n, d := range refs {
			if strings.HasSuffix(n, "@"+digest) {
				if h, ok := hexOf(d); ok {
					return h, nil
				}
			}
		}
		return "", &NotFoundError{Ref: ref}
	}
	n, err := normalize(ref)
	if err != nil {
		return "", err
	}
	d, ok := refs[n]
	if !ok {
		return "", &NotFoundError{Ref: ref}
	}
	h, ok := hexOf(d)
	if !ok {
		return "", fmt.Errorf("image store: refs.json: %s: bad digest %q", n, d)
	}
	return h, nil
}

// Remove removes a name, and the image when no name is left; or, given a
// digest, the image and all its names. An image held by a lease is not
// removed (*InUseError). Blobs no image uses any more go with it.
func (s *Store) Remove(ctx context.Context, ref string) error {
	unlock, err := s.lock(ctx, true)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.recover(); err != nil {
		return err
	}
	refs, err := s.refs()
	if err != nil {
		return err
	}
	h, err := s.resolve(refs, ref)
	if err != nil {
		return err
	}
	digest := "sha256:" + h
	byName := false
	if _, ok := hexOf(ref); !ok {
		if n, err := normalize(ref); err == nil && refs[n] == digest {
			delete(refs, n)
			byName = true
		} else if refs[ref] == digest {
			delete(refs, ref)
			byName = true
		}
	}
	if byName && len(namesOf(refs, digest)) > 0 {
		return s.writeRefs(refs)
	}
	if s.leased(h) {
		return &InUseError{Digest: digest}
	}
	for n, d := range refs {
		if d == digest {
			delete(refs, n)
		}
	}
	if err := s.writeRefs(refs); err != nil {
		return err
	}
	if err := s.removeImage(h); err != nil {
		return err
	}
	_, err = s.gcBlobs()
	return err
}

// removeImage removes the record first (so the rootfs is at once an
// orphan that recovery would remove), then the rootfs.
func (s *Store) removeImage(h string) error {
	if err := os.Remove(s.recordPath(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image store: %w", err)
	}
	if err := removeTree(s.rootfsPath(h)); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// gcBlobs removes the blobs no record names.
func (s *Store) gcBlobs() (int, error) {
	keep := map[string]bool{}
	ims, err := s.list()
	if err != nil {
		return 0, err
	}
	for _, im := range ims {
		for _, d := range append([]string{im.Digest, im.Config, im.IndexDigest}, layerDigests(im)...) {
			if h, ok := hexOf(d); ok {
				keep[h] = true
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	if err != nil {
		return 0, fmt.Errorf("image store: %w", err)
	}
	n := 0
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.Remove(s.blobPath(e.Name())); err != nil {
				return n, fmt.Errorf("image store: %w", err)
			}
			n++
		}
	}
	return n, nil
}

func layerDigests(im *Image) []string {
	var out []string
	for _, l := range im.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// PruneOptions say what Prune may remove.
type PruneOptions struct {
	// All removes every image not in use; without it only images without
	// a name are.
	All bool
	// InUse, if set, reports images (by manifest digest) that a caller
	// knows to be in use, besides those held by a lease.
	InUse func(digest string) bool
}

// PruneReport is what Prune removed.
type PruneReport struct {
	Images []string // manifest digests
	Blobs  int
}

// Prune removes the images nothing uses (no lease, not InUse; with All,
// named or not) and the blobs no image uses.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (*PruneReport, error) {
	unlock, err := s.lock(ctx, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.recover(); err != nil {
		return nil, err
	}
	ims, err := s.list()
	if err != nil {
		return nil, err
	}
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	rep := &PruneReport{}
	for _, im := range ims {
		h, _ := hexOf(im.Digest)
		if (len(im.Names) > 0 && !opts.All) || s.leased(h) || (opts.InUse != nil && opts.InUse(im.Digest)) {
			continue
		}
		for _, n := range im.Names {
			delete(refs, n)
		}
		if err := s.writeRefs(refs); err != nil {
			return rep, err
		}
		if err := s.removeImage(h); err != nil {
			return rep, err
		}
		rep.Images = append(rep.Images, im.Digest)
	}
	rep.Blobs, err = s.gcBlobs()
	return rep, err
}

// Use finds ref in the store and leases it (see Lease) for a sandbox to
// run on: the image and its root, free of symbolic links.
func (s *Store) Use(ctx context.Context, ref string) (im *Image, root string, release func(), err error) {
	if im, err = s.Inspect(ctx, ref); err != nil {
		return nil, "", nil, err
	}
	if release, err = s.Lease(ctx, im.Digest); err != nil {
		return nil, "", nil, err
	}
	if root, err = filepath.EvalSymlinks(im.Rootfs); err != nil {
		release()
		return nil, "", nil, fmt.Errorf("image %s: its root %s: %w", im.Digest, im.Rootfs, err)
	}
	return im, root, release, nil
}

// Lease marks the image digest in use until release is called or the
// process dies: a file in leases/HEX/ held with a shared flock, which
// Remove and Prune test and a dead holder's lease fails.
func (s *Store) Lease(ctx context.Context, digest string) (release func(), err error) {
	h, ok := hexOf(digest)
	if !ok {
		return nil, fmt.Errorf("image store: lease: %q is not a sha256 digest", digest)
	}
	unlock, err := s.lock(ctx, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(s.recordPath(h)); err != nil {
		return nil, &NotFoundError{Ref: digest}
	}
	d := filepath.Join(s.dir, "leases", h)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("image store: lease: %w", err)
	}
	f, err := os.CreateTemp(d, "lease-")
	if err != nil {
		return nil, fmt.Errorf("image store: lease: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("image store: lease: %w", err)
	}
	return func() { os.Remove(f.Name()); f.Close() }, nil
}

// leased reports whether a live lease holds h; dead holders' leases are
// removed. Called with the exclusive lock.
func (s *Store) leased(h string) bool {
	d := filepath.Join(s.dir, "leases", h)
	ents, err := os.ReadDir(d)
	if err != nil {
		return false
	}
	held := false
	for _, e := range ents {
		p := filepath.Join(d, e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			held = true
		} else {
			os.Remove(p)
		}
		f.Close()
	}
	if !held {
		os.Remove(d)
	}
	return held
}
