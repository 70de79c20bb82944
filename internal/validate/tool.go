package validate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds of a ReadOnlyPaths tree the validator digest covers: a tree
// beyond them is refused when the worker starts (name a narrower
// directory).
const (
	MaxTreeEntries = 100_000
	MaxTreeBytes   = 1 << 30
)

// tool is what the validator is, as the verdict attests it: its binary
// (Command[0]) and every ReadOnlyPaths tree of the kind, digested when the
// worker starts and checked before each call by stat identity, rehashed
// only when something changed.
type tool struct {
	// image is the manifest digest of the image the validator runs in
	// ("": the host's system); binary is then below the image's root.
	image  string
	binary string
	// shown is the binary's path as the kind names it (inside the
	// image, if any): what the digest records.
	shown     string
	binarySum string
	binaryID  binID
	trees     []*tree
	// digest is the validator digest: sha256 over the binary's and each
	// tree's record (see validatorDigest).
	digest string
}

// tree is one ReadOnlyPaths directory: its entries sorted by path.
type tree struct {
	root    string // as the kind names it
	sum     string
	entries []treeEntry
}

// treeEntry is one entry of a tree: its kind (f file, d directory, l
// symbolic link, o anything else), permission and special mode bits, its
// contents' sha256 (a file) or target (a link), and its stat identity.
type treeEntry struct {
	rel   string
	kind  byte
	mode  uint32
	value string
	id    binID
}

// newTool digests the validator's binary and trees.
func newTool(binary string, roots []string) (*tool, error) {
	return newToolIn("", binary, binary, roots)
}

// newToolIn is newTool for a validator in the image of manifest digest
// image ("": the host's system), binary being its path on the host and
// shown the kind's.
func newToolIn(image, binary, shown string, roots []string) (*tool, error) {
	sum, err := fileDigest(binary)
	if err != nil {
		return nil, fmt.Errorf("validator %s: %w", binary, err)
	}
	t := &tool{image: image, binary: binary, shown: shown, binarySum: sum, binaryID: statID(binary)}
	for _, root := range roots {
		tr, err := hashTree(root, MaxTreeEntries, MaxTreeBytes)
		if err != nil {
			return nil, err
		}
		t.trees = append(t.trees, tr)
	}
	t.digest = t.validatorDigest()
	return t, nil
}

// validatorDigest is sha256 over, for the image (if any), the binary and
// then each tree in the kind's order, a record of NUL-terminated fields:
// "image", its manifest digest; "binary", its path, its sha256; "tree",
// its path, its tree digest.
func (t *tool) validatorDigest() string {
	h := sha256.New()
	field := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	if t.image != "" {
		field("image")
		field(t.image)
	}
	field("binary")
	field(t.shown)
	field(t.binarySum)
	for _, tr := range t.trees {
		field("tree")
		field(tr.root)
		field(tr.sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// treeSums are the trees' digests by path.
func (t *tool) treeSums() map[string]string {
	if len(t.trees) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, tr := range t.trees {
		m[tr.root] = tr.sum
	}
	return m
}

// check is the per-call check: nil when the binary and every tree are as
// they were digested (by stat identity; what was only touched is rehashed
// and accepted), else an error naming what changed.
func (t *tool) check() error {
	if id := statID(t.binary); id != t.binaryID || id == (binID{}) {
		if d, err := fileDigest(t.binary); err != nil || d != t.binarySum {
			return fmt.Errorf("the validator %s changed since the worker started (or cannot be read)", t.binary)
		}
		t.binaryID = id // touched, same contents
	}
	for i, tr := range t.trees {
		same, err := tr.sameStat()
		if err != nil {
			return fmt.Errorf("the validator's tree %s cannot be read: %w", tr.root, err)
		}
		if same {
			continue
		}
		now, err := hashTree(tr.root, MaxTreeEntries, MaxTreeBytes)
		if err != nil {
			return fmt.Errorf("the validator's tree %s changed: %w", tr.root, err)
		}
		if now.sum != tr.sum {
			return fmt.Errorf("the validator's tree %s changed since the worker started: %s", tr.root, describeChanges(tr, now))
		}
		t.trees[i] = now // touched, same contents
	}
	return nil
}

// hashTree digests the tree at root (a symbolic link as root is followed;
// none below it is): each entry, sorted by its path relative to root
// ("." for root), as NUL-terminated fields: kind, mode (octal), path,
// then the contents' sha256 (a file), the target (a link) or nothing.
// More than maxEntries entries or maxBytes of file contents is refused.
func hashTree(root string, maxEntries int, maxBytes int64) (*tree, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("ReadOnlyPaths=%s: %w", root, err)
	}
	tr := &tree{root: root}
	var total int64
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if len(tr.entries) >= maxEntries {
			return fmt.Errorf("more than %d entries: too many to attest; name a narrower directory", maxEntries)
		}
		rel, _ := filepath.Rel(real, p)
		e, size, err := statEntry(p, rel)
		if err != nil {
			return err
		}
		if total += size; total > maxBytes {
			return fmt.Errorf("more than %d bytes of files: too much to attest; name a narrower directory", maxBytes)
		}
		if e.kind == 'f' {
			if e.value, err = fileDigest(p); err != nil {
				return err
			}
		}
		tr.entries = append(tr.entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ReadOnlyPaths=%s: %w", root, err)
	}
	slices.SortFunc(tr.entries, func(a, b treeEntry) int { return strings.Compare(a.rel, b.rel) })
	h := sha256.New()
	for _, e := range tr.entries {
		for _, f := range []string{string(e.kind), strconv.FormatUint(uint64(e.mode), 8), e.rel, e.value} {
			h.Write([]byte(f))
			h.Write([]byte{0})
		}
	}
	tr.sum = hex.EncodeToString(h.Sum(nil))
	return tr, nil
}

// statEntry is p's entry without its contents' digest, and its size when
// it is a regular file.
func statEntry(p, rel string) (treeEntry, int64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return treeEntry{}, 0, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	e := treeEntry{rel: rel, mode: uint32(st.Mode & 0o7777), // Mode is uint16 and Dev int32 on macOS
		id: binID{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}}
	var size int64
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.kind, size = 'f', st.Size
	case unix.S_IFDIR:
		e.kind = 'd'
	case unix.S_IFLNK:
		e.kind = 'l'
		target, err := os.Readlink(p)
		if err != nil {
			return treeEntry{}, 0, err
		}
		e.value = target
	default:
		e.kind = 'o'
	}
	return e, size, nil
}

// sameStat walks the tree again with lstat only: true when every entry
// is there with the same kind, mode and stat identity, and no other.
func (tr *tree) sameStat() (bool, error) {
	real, err := filepath.EvalSymlinks(tr.root)
	if err != nil {
		return false, err
	}
	i := 0
	errDiffers := errors.New("differs")
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, p)
		e, _, err := statEntry(p, rel)
		if err != nil {
			return err
		}
		// WalkDir visits in lexical order of each directory's names,
		// which is not the order of whole relative paths: look up by
		// position first, then by search.
		var want *treeEntry
		if i < len(tr.entries) && tr.entries[i].rel == rel {
			want = &tr.entries[i]
		} else if j, ok := slices.BinarySearchFunc(tr.entries, rel, func(a treeEntry, r string) int { return strings.Compare(a.rel, r) }); ok {
			want = &tr.entries[j]
		}
		if want == nil || want.kind != e.kind || want.mode != e.mode || want.id != e.id || (e.kind == 'l' && want.value != e.value) {
			return errDiffers
		}
		i++
		return nil
	})
	if errors.Is(err, errDiffers) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return i == len(tr.entries), nil
}

// describeChanges names what differs between two digests of one tree:
// at most five paths, each added, removed or changed.
func describeChanges(was, now *tree) string {
	old := map[string]treeEntry{}
	for _, e := range was.entries {
		old[e.rel] = e
	}
	var out []string
	for _, e := range now.entries {
		o, ok := old[e.rel]
		delete(old, e.rel)
		switch {
		case !ok:
			out = append(out, e.rel+" added")
		case o.kind != e.kind || o.mode != e.mode || o.value != e.value:
			out = append(out, e.rel+" changed")
		}
	}
	var gone []string
	for rel := range old {
		gone = append(gone, rel+" removed")
	}
	slices.Sort(gone)
	out = append(out, gone...)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, ", ")
}

// fileDigest is the sha256 of the file at p.
func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
