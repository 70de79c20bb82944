package imagestore

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/klauspost/compress/zstd"
)

// Limits bound what one image's layers may hold. A zero field takes its
// DefaultLimits value.
type Limits struct {
	MaxEntries    int64 // entries over all layers
	MaxFileBytes  int64 // one regular file
	MaxTotalBytes int64 // all regular files of all layers
	MaxLayerBytes int64 // one layer's decompressed stream (tar headers included)
	MaxPathLen    int   // an entry's name or link target
}

// DefaultLimits are generous for toolchain images and small enough to
// stop a bomb before it fills a disk.
func DefaultLimits() Limits {
	return Limits{
		MaxEntries:    1 << 20,
		MaxFileBytes:  4 << 30,
		MaxTotalBytes: 32 << 30,
		MaxLayerBytes: 16 << 30,
		MaxPathLen:    4096,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	if l.MaxTotalBytes > 0 {
		d.MaxTotalBytes = l.MaxTotalBytes
	}
	if l.MaxLayerBytes > 0 {
		d.MaxLayerBytes = l.MaxLayerBytes
	}
	if l.MaxPathLen > 0 {
		d.MaxPathLen = l.MaxPathLen
	}
	return d
}

// UnpackOptions says how Unpack applies layers.
type UnpackOptions struct {
	Limits Limits
	// KeepSetuid keeps setuid and setgid bits (dropped by default).
	KeepSetuid bool
	// Chown sets owners from the tar headers (for root; a user's unpack
	// keeps the user's own ownership).
	Chown bool
	// Progress, if set, is told of each layer as it is applied.
	Progress func(Event)

	// afterEntry, if set, is called after each entry (tests).
	afterEntry func(n int64)
}

// UnpackLayer is one layer to apply, bottom first.
type UnpackLayer struct {
	Digest string // the blob's digest, named in errors
	DiffID string // the uncompressed stream's digest; "" not checked
	Open   func() (io.ReadCloser, error)
	// Verify, if set, is called once the layer is applied; its error
	// fails the unpack (a fetched blob's digest, checked as it streamed).
	Verify func() error
}

// UnpackReport tells what Unpack left out.
type UnpackReport struct {
	Skipped       []EntryError // device nodes, FIFOs and unknown types (Err is ErrSkipped)
	DroppedSetuid int          // entries whose setuid/setgid bits were dropped
	DroppedXattrs int          // entries whose extended attributes were dropped
}

// Unpack applies layers, bottom first, onto the directory dir (which
// should be empty), never writing outside it. See the package
// documentation for what is refused, skipped and dropped.
func Unpack(ctx context.Context, dir string, layers []UnpackLayer, opts UnpackOptions) (*UnpackReport, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()
	u := &unpacker{root: root, opts: opts, lim: opts.Limits.withDefaults(), dirs: map[string]*tar.Header{}, report: &UnpackReport{}}
	for i, l := range layers {
		if opts.Progress != nil {
			opts.Progress(Event{Kind: EventUnpack, Digest: l.Digest, Index: i, Count: len(layers)})
		}
		if err := u.layer(ctx, l); err != nil {
			return nil, err
		}
	}
	if err := u.finishDirs(); err != nil {
		return nil, err
	}
	return u.report, nil
}

type unpacker struct {
	root    *os.Root
	opts    UnpackOptions
	lim     Limits
	entries int64
	total   int64
	dirs    map[string]*tar.Header // directory → its header, modes applied at the end
	report  *UnpackReport

	layerDigest string
	entry       string          // the entry being applied
	created     map[string]bool // resolved paths this layer made (opaque dirs keep them)
}

func (u *unpacker) refuse(err error) error {
	return &EntryError{Layer: u.layerDigest, Entry: u.entry, Err: err}
}

func (u *unpacker) layer(ctx context.Context, l UnpackLayer) error {
	u.layerDigest, u.entry = l.Digest, ""
	u.created = map[string]bool{}
	rc, err := l.Open()
	if err != nil {
		return fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	defer rc.Close()
	stream, closeStream, err := decompress(rc)
	if err != nil {
		return fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	defer closeStream()
	// Fetching, hashing the blob and decompressing run ahead on a
	// goroutine of their own while this one hashes the stream (diff_id),
	// reads the tar and writes the files, as crane | tar do in two
	// processes. The bound is checked here, so the goroutine decompresses
	// at most its read-ahead past it.
	ra := newReadAhead(stream)
	defer ra.stop()
	cr := &countingReader{r: ra, limit: u.lim.MaxLayerBytes, h: sha256.New()}
	tr := tar.NewReader(cr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.streamErr(err)
		}
		u.entry = hdr.Name
		if err := u.apply(hdr, tr); err != nil {
			var ee *EntryError
			if errors.As(err, &ee) {
				return err
			}
			return u.streamErr(err)
		}
		if u.opts.afterEntry != nil {
			u.opts.afterEntry(u.entries)
		}
	}
	// The rest of the stream (tar's padding, or trailing bytes) counts
	// against the bound too and is part of the diff_id.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return u.streamErr(err)
	}
	ra.stop() // the blob is read to its end (Verify reads it next)
	if l.DiffID != "" {
		if got := "sha256:" + hex.EncodeToString(cr.h.Sum(nil)); got != l.DiffID {
			return fmt.Errorf("layer %s: %w", l.Digest, &DigestMismatchError{What: "diff_id", Want: l.DiffID, Got: got, WantSize: -1})
		}
	}
	if l.Verify != nil {
		return l.Verify()
	}
	return nil
}

// streamErr names the layer and entry of a read error; a bound is a
// refusal.
func (u *unpacker) streamErr(err error) error {
	if errors.Is(err, ErrDecompressionBomb) {
		return u.refuse(ErrDecompressionBomb)
	}
	if u.entry != "" {
		return fmt.Errorf("layer %s: entry %q: %w", u.layerDigest, u.entry, err)
	}
	return fmt.Errorf("layer %s: %w", u.layerDigest, err)
}

// decompress detects gzip, zstd or a plain tar stream by its magic.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	default:
		return br, func() {}, nil
	}
}

// Read-ahead: how much of a layer's decompressed stream is read ahead of
// the unpacker, in chunks of readAheadChunk bytes.
const (
	readAheadChunk = 256 << 10
	readAheadDepth = 4
)

// readAhead reads r on a goroutine of its own, up to readAheadDepth
// chunks ahead of its reader, and hands the chunks over; memory is
// bounded to readAheadDepth+2 chunks. stop ends the goroutine (which may
// finish a read of r first) and waits for it; r is not read after stop
// returns.
type readAhead struct {
	chunks chan []byte   // full chunks, closed after err is set
	free   chan []byte   // chunks to fill
	done   chan struct{} // closed by stop
	exited chan struct{}
	err    error
	cur    []byte // what is left of the chunk being read
	buf    []byte // that chunk, whole
	once   sync.Once
}

func newReadAhead(r io.Reader) *readAhead {
	a := &readAhead{chunks: make(chan []byte, readAheadDepth), free: make(chan []byte, readAheadDepth+2),
		done: make(chan struct{}), exited: make(chan struct{})}
	for range readAheadDepth + 2 {
		a.free <- make([]byte, readAheadChunk)
	}
	go func() {
		defer close(a.exited)
		for {
			var b []byte
			select {
			case b = <-a.free:
			case <-a.done:
				return
			}
			n, err := io.ReadFull(r, b)
			if n > 0 {
				select {
				case a.chunks <- b[:n]:
				case <-a.done:
					return
				}
			}
			if err != nil {
				if err == io.ErrUnexpectedEOF {
					err = io.EOF
				}
				a.err = err
				close(a.chunks)
				return
			}
		}
	}()
	return a
}

func (a *readAhead) Read(p []byte) (int, error) {
	for len(a.cur) == 0 {
		if a.buf != nil {
			a.free <- a.buf[:cap(a.buf)]
			a.buf = nil
		}
		b, ok := <-a.chunks
		if !ok {
			return 0, a.err
		}
		a.cur, a.buf = b, b
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

func (a *readAhead) stop() {
	a.once.Do(func() { close(a.done) })
	<-a.exited
}

// countingReader bounds and hashes a decompressed stream.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
	h     hash.Hash
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		// One byte more tells a stream that ends exactly at the bound
		// from one that goes on.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, ErrDecompressionBomb
		}
	}
	if rem := c.limit - c.n + 1; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	if c.n > c.limit {
		return n, ErrDecompressionBomb
	}
	return n, err
}

// cleanName checks an entry name or hard link target and returns its
// components, relative to the image root ("/x" and "x" alike).
func (u *unpacker) cleanName(name string, reason error) ([]string, error) {
	if len(name) > u.lim.MaxPathLen {
		return nil, u.refuse(ErrPathTooLong)
	}
	var parts []string
	for c := range strings.SplitSeq(name, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			return nil, u.refuse(reason)
		case len(c) > 255:
			return nil, u.refuse(ErrPathTooLong)
		default:
			parts = append(parts, c)
		}
	}
	return parts, nil
}

// maxHops bounds the symbolic links followed for one name (as the
// kernel's 40).
const maxHops = 40

// resolve turns components into a path relative to the image root with no
// symbolic link before its last component, following links as the
// kernel would if the image were the root: an absolute target restarts
// from the image root; a relative ".." above the root is refused. The
// last component is followed only if followLast. Missing directories on
// the way are made (0700, fixed at the end) if mkdirs.
func (u *unpacker) resolve(parts []string, followLast, mkdirs bool) (string, error) {
	var cur []string
	queue := slices.Clone(parts)
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", u.refuse(ErrSymlinkEscape)
			}
			cur = cur[:len(cur)-1]
			continue
		}
		last := len(queue) == 0
		p := path.Join(append(slices.Clone(cur), c)...)
		if last && !followLast {
			cur = append(cur, c)
			break
		}
		fi, err := u.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if mkdirs && !last {
				if err := u.root.Mkdir(p, 0o700); err != nil {
					return "", err
				}
				u.dirs[p] = &tar.Header{Mode: 0o755}
				u.created[p] = true
			}
			cur = append(cur, c)
			continue
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			if hops++; hops > maxHops {
				return "", u.refuse(ErrSymlinkEscape)
			}
			target, err := u.root.Readlink(p)
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				cur = nil
			}
			queue = append(strings.Split(target, "/"), queue...)
			continue
		case !fi.IsDir() && !last:
			return "", u.refuse(ErrNotDir)
		}
		cur = append(cur, c)
	}
	if len(cur) == 0 {
		return ".", nil
	}
	return path.Join(cur...), nil
}

// removeExisting makes room for a new entry at p.
func (u *unpacker) removeExisting(p string) error {
	fi, err := u.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return u.root.RemoveAll(p)
	default:
		return u.root.Remove(p)
	}
}

const whiteoutPrefix, opaqueMarker = ".wh.", ".wh..wh..opq"

func (u *unpacker) apply(hdr *tar.Header, r io.Reader) error {
	parts, err := u.cleanName(hdr.Name, ErrTraversal)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return nil // the root itself
	}
	if u.entries++; u.entries > u.lim.MaxEntries {
		return u.refuse(ErrTooManyEntries)
	}
	// Extended attributes (SCHILY.xattr.*, also what tar.Header.Xattrs
	// shows) are all dropped: file capabilities and security labels are
	// the host's to give, not an image's.
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") || strings.HasPrefix(k, "LIBARCHIVE.xattr.") {
			u.report.DroppedXattrs++
			break
		}
	}
	base := parts[len(parts)-1]
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(parts[:len(parts)-1], base)
	}
	p, err := u.resolve(parts, false, true)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := u.root.Lstat(p)
		if err == nil && !fi.IsDir() {
			if err := u.root.Remove(p); err != nil {
				return err
			}
		}
		if err != nil || !fi.IsDir() {
			if err := u.root.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
		u.created[p] = true
		u.dirs[p] = hdr
		return u.chown(p, hdr)
	case tar.TypeReg: // tar.Reader turns the old TypeRegA into TypeReg
		if hdr.Size > u.lim.MaxFileBytes {
			return u.refuse(ErrFileTooLarge)
		}
		if u.total += hdr.Size; u.total > u.lim.MaxTotalBytes {
			return u.refuse(ErrImageTooLarge)
		}
		if err := u.removeExisting(p); err != nil {
			return err
		}
		// A new inode, never one truncated in place: a hard link from a
		// lower layer keeps its content.
		f, err := u.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		u.created[p] = true
		if err := u.chown(p, hdr); err != nil {
			return err
		}
		if err := u.root.Chmod(p, u.mode(hdr)); err != nil {
			return err
		}
		return u.root.Chtimes(p, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if len(hdr.Linkname) > u.lim.MaxPathLen {
			return u.refuse(ErrPathTooLong)
		}
		if err := u.removeExisting(p); err != nil {
			return err
		}
		if err := u.root.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
		u.created[p] = true
		if u.opts.Chown {
			return u.root.Lchown(p, hdr.Uid, hdr.Gid)
		}
		return nil
	case tar.TypeLink:
		tparts, err := u.cleanName(hdr.Linkname, ErrHardlinkOutside)
		if err != nil {
			return err
		}
		if len(tparts) == 0 {
			return u.refuse(ErrHardlinkOutside)
		}
		tp, err := u.resolve(tparts, false, false)
		if err != nil {
			var ee *EntryError
			if errors.As(err, &ee) {
				ee.Err = fmt.Errorf("%w: %w", ErrHardlinkOutside, ee.Err)
			}
			return err
		}
		fi, err := u.root.Lstat(tp)
		if err != nil || fi.IsDir() {
			return u.refuse(ErrHardlinkOutside)
		}
		if tp == p {
			return nil
		}
		if err := u.removeExisting(p); err != nil {
			return err
		}
		if err := u.root.Link(tp, p); err != nil {
			return err
		}
		u.created[p] = true
		return nil
	default:
		// Device nodes, FIFOs and what else tar may hold are not made:
		// a sandbox gets its /dev from soda, never from an image.
		u.report.Skipped = append(u.report.Skipped, EntryError{Layer: u.layerDigest, Entry: hdr.Name, Err: fmt.Errorf("%w: type %q", ErrSkipped, hdr.Typeflag)})
		return nil
	}
}

// whiteout applies .wh.NAME (remove NAME from the layers below) or the
// opaque marker (remove all that the layers below put in the directory).
func (u *unpacker) whiteout(dirParts []string, base string) error {
	dir, err := u.resolve(dirParts, true, base == opaqueMarker)
	if err != nil {
		return err
	}
	if base == opaqueMarker {
		f, err := u.root.Open(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing below to hide
		}
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, n := range names {
			if p := path.Join(dir, n); !u.created[p] {
				if err := u.root.RemoveAll(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return u.refuse(ErrBadWhiteout)
	}
	if fi, err := u.root.Lstat(dir); err != nil || !fi.IsDir() {
		return nil // nothing below to hide
	}
	err = u.root.RemoveAll(path.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (u *unpacker) chown(p string, hdr *tar.Header) error {
	if !u.opts.Chown {
		return nil
	}
	return u.root.Lchown(p, hdr.Uid, hdr.Gid)
}

// mode is hdr's permission bits, less setuid/setgid unless kept.
func (u *unpacker) mode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if hdr.Mode&0o6000 != 0 {
		if !u.opts.KeepSetuid {
			u.report.DroppedSetuid++
			return m
		}
		if hdr.Mode&0o4000 != 0 {
			m |= fs.ModeSetuid
		}
		if hdr.Mode&0o2000 != 0 {
			m |= fs.ModeSetgid
		}
	}
	return m
}

// finishDirs gives directories their modes and times, deepest first, now
// that nothing more is written in them.
func (u *unpacker) finishDirs() error {
	paths := make([]string, 0, len(u.dirs))
	for p := range u.dirs {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range paths {
		hdr := u.dirs[p]
		fi, err := u.root.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // whited out or replaced since
		}
		if err := u.root.Chmod(p, u.mode(hdr)); err != nil {
			return err
		}
		if !hdr.ModTime.IsZero() {
			if err := u.root.Chtimes(p, hdr.ModTime, hdr.ModTime); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeTree removes dir, making each directory in it writable first (a
// user's unpack keeps an image's 0555 directories), following no link.
func removeTree(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
