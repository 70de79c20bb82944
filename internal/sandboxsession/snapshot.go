package sandboxsession

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
)

// A snapshot of the workspace is one command in the sandbox (snapshotScript)
// whose standard output is a listing of every entry, made by find, then a
// tar stream of the requested paths. The listing is the truth about what
// exists, its type and its mode (tar skips sockets and cannot read what
// the agent made unreadable); the tar stream gives the contents of
// regular files. Both are untrusted input: parsed with bounds on entries,
// on the listing's bytes (maxListing; a name longer than maxPathLen is
// kept shortened, keyOf) and on the contents' bytes (past them, files
// stay unread: a sparse file far larger than the workspace, say).
//
// Entries the owner cannot read (a file) or enter (a directory) are
// listed as they are, then made readable for the copy, and their modes
// put back after it, in reverse order, the workspace itself included: no
// process of the agent's runs between calls (every call's processes end
// with it), so nothing sees the change. find prints those on fd 3, into a
// bash array (not a file: the agent may have filled /tmp).
const snapshotScript = `if [[ ! -r ` + Workspace + ` || ! -x ` + Workspace + ` ]]; then
	top=$(stat -c %a ` + Workspace + `) && chmod u+rx ` + Workspace + ` || exit 3
fi
cd ` + Workspace + ` || exit 3
rec='%y\0%m\0%s\0%l\0%p\0'
exec 4>&1
mapfile -d '' fixed < <(find . -mindepth 1 \( -type d ! -perm -u=rx -printf "$rec" -fprintf /dev/fd/3 '%m\0%p\0' -execdir chmod u+rx -- {} \; \) -o \( ! -type d ! -type l ! -perm -u=r -printf "$rec" -fprintf /dev/fd/3 '%m\0%p\0' -execdir chmod u+r -- {} + \) -o -printf "$rec" 3>&1 1>&4)
exec 4>&-
printf '\0'
tar -c -f - --ignore-failed-read --no-wildcards -- "$@"
rc=$?
# Back as the agent left them, deepest first; a path too long for one
# call is reached a directory at a time.
back() { chmod "$1" -- "$2" 2>/dev/null || (p=$2; while [[ $p == */* ]]; do cd -- "${p%%/*}" || exit; p=${p#*/}; done; chmod "$1" -- "$p"); }
for ((i=${#fixed[@]}-2; i>=0; i-=2)); do back "${fixed[i]}" "${fixed[i+1]}"; done
if [[ -n $top ]]; then chmod "$top" ` + Workspace + `; fi
exit $rc`

// Bounds of a snapshot's listing.
const (
	// maxListing bounds the bytes of the listing (every entry's path):
	// 200000 entries of 150 bytes, or fewer of longer names.
	maxListing = 32 << 20
	// keptName is how much of a name longer than maxPathLen is kept.
	keptName = 1024
)

// keyOf is name as a snapshot keeps it: a name longer than maxPathLen
// (which no client can give back, CheckPath) is shortened, with a digest
// of the whole, so that two such names stay apart.
func keyOf(name string) string {
	if len(name) <= maxPathLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return longKey(name[:keptName], len(name), sum[:])
}

// longKey is the key of a long name from its start, length and digest.
func longKey(start string, n int, sum []byte) string {
	return fmt.Sprintf("%s…(%d bytes, sha256 %x)", start, n, sum[:8])
}

// Entry is one thing in a workspace snapshot or a baseline.
type Entry struct {
	// Type is file, symlink, dir or other (a FIFO, socket or device).
	Type string
	// Mode is its permission bits (and setuid, setgid, sticky).
	Mode int64
	// Size is a file's size in bytes.
	Size int64
	// Sum is a file's sha256; Unread says its contents could not be read.
	Sum    [32]byte
	Unread bool
	// LongName says that the entry's name was longer than any path a
	// call takes, and is kept shortened (keyOf).
	LongName bool
	// Target is a symlink's target.
	Target string
	// off is where a stored file's contents start in its store.
	off int64
	// tarMode is the mode the tar stream gave it (inTar), which is what
	// an extraction of the stream made: opened up, if it was.
	tarMode int64
	inTar   bool
}

// snapshot is the workspace (or part of it) as one snapshot saw it.
type snapshot struct {
	entries map[string]*Entry
	// kept are the contents of the files keep asked for.
	kept map[string][]byte
	// copied is how many bytes of file contents the tar stream held.
	copied int64
	// partial says that the stream held more contents than one snapshot
	// reads: the files past that are unread.
	partial bool
}

// snapOpts says what a snapshot keeps of the contents it reads.
type snapOpts struct {
	// paths are the tar stream's (default: the whole workspace).
	paths []string
	// keep, when set, is asked before each regular file's contents are
	// read (name and size) whether to keep them (up to keepMax in all).
	keep    func(name string, size int64) bool
	keepMax int64
	// store, when set, gets a copy of every regular file's contents.
	store *blobStore
	// tee, when set, gets the raw tar stream (a child's seed).
	tee io.Writer
	// maxBytes bounds the file contents in the tar stream.
	maxBytes int64
}

// errTooBig says that a tar stream from the sandbox held more than allowed.
var errTooBig = errors.New("more than the workspace can hold")

// snapshotOf reads a snapshot from the script's output r.
func snapshotOf(ctx context.Context, r io.Reader, o snapOpts) (*snapshot, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	s := &snapshot{entries: map[string]*Entry{}, kept: map[string][]byte{}}
	if err := readListing(br, s.entries, maxEntries); err != nil {
		return nil, err
	}
	var tr io.Reader = br
	if o.tee != nil {
		tr = io.TeeReader(br, o.tee)
	}
	if err := s.readTar(ctx, tr, o); err != nil {
		return nil, err
	}
	// The listing is of the whole workspace; a snapshot of some paths
	// holds what is at or below them.
	if len(o.paths) > 0 && !(len(o.paths) == 1 && o.paths[0] == ".") {
		for name := range s.entries {
			if !below(name, o.paths) {
				delete(s.entries, name)
			}
		}
	}
	return s, nil
}

// below says whether name is one of paths or inside one.
func below(name string, paths []string) bool {
	for _, p := range paths {
		if name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// nulReader reads NUL-terminated fields, at most budget bytes in all. A
// field longer than maxPathLen (a name no client can give back) is kept
// as keyOf keeps it, from a digest taken as it is read: the rest is read
// and counted, not kept.
type nulReader struct {
	br     *bufio.Reader
	budget int64
}

func (r *nulReader) field() (string, error) {
	f, _, err := r.name()
	return f, err
}

// name is field, and whether the field was shortened (keyOf).
func (r *nulReader) name() (string, bool, error) {
	var out []byte
	var h hash.Hash
	n := 0
	for {
		b, err := r.br.ReadSlice(0)
		r.budget -= int64(len(b))
		if r.budget < 0 {
			return "", false, fmt.Errorf("read the workspace: its listing is over %d bytes (names too long or too many): remove some, or sandbox_reset", maxListing)
		}
		done := err == nil
		if done {
			b = b[:len(b)-1]
		}
		n += len(b)
		if h == nil && len(out)+len(b) > maxPathLen {
			h = sha256.New()
			h.Write(out)
		}
		if h != nil {
			h.Write(b)
			if room := keptName - len(out); room > 0 {
				out = append(out, b[:min(len(b), room)]...)
			}
		} else {
			out = append(out, b...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return "", false, fmt.Errorf("read the workspace: the listing ended early: %w", err)
		}
		if h != nil {
			return longKey(string(out[:min(len(out), keptName)]), n, h.Sum(nil)), true, nil
		}
		return string(out), false, nil
	}
}

// readListing reads the find listing: records of five NUL-terminated
// fields (type letter, octal mode, size, symlink target, ./path), ended
// by an empty field. An entry the script opens up for the copy is listed
// before, with the mode the agent left it.
func readListing(br *bufio.Reader, into map[string]*Entry, max int) error {
	// A name is kept up to just past maxPathLen: keyOf tells it is long.
	r := &nulReader{br: br, budget: maxListing}
	for {
		typ, err := r.field()
		if err != nil {
			return err
		}
		if typ == "" {
			return nil
		}
		var f [3]string
		for i := range f {
			if f[i], err = r.field(); err != nil {
				return err
			}
		}
		name, long, err := r.name()
		if err != nil {
			return err
		}
		modeS, sizeS, target := f[0], f[1], f[2]
		name = strings.TrimPrefix(name, "./")
		if name == "" || name == "." {
			continue
		}
		if len(into) >= max {
			return fmt.Errorf("read the workspace: more than %d entries", max)
		}
		mode, err := strconv.ParseInt(modeS, 8, 64)
		if err != nil {
			return fmt.Errorf("read the workspace: mode %q of %q", modeS, name)
		}
		e := &Entry{Mode: mode & 0o7777, Unread: true, LongName: long}
		switch typ {
		case "f":
			e.Type = "file"
			// A size that is not one (negative: a diff would make a
			// slice of it) is a listing not made by find.
			if e.Size, err = strconv.ParseInt(sizeS, 10, 64); err != nil || e.Size < 0 {
				return fmt.Errorf("read the workspace: size %q of %q", sizeS, name)
			}
		case "d":
			e.Type, e.Unread = "dir", false
		case "l":
			e.Type, e.Target, e.Unread, e.Mode = "symlink", target, false, 0o777
		default:
			e.Type, e.Unread = "other", false
		}
		into[name] = e
	}
}

// readTar reads the tar stream: regular files' contents are hashed (and
// kept, stored, as asked); a hard link takes its target's.
func (s *snapshot) readTar(ctx context.Context, r io.Reader, o snapOpts) error {
	tr := tar.NewReader(r)
	var kept int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			_, _ = io.Copy(io.Discard, r) // the stream's padding, for a tee
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the workspace: %w", err)
		}
		name := keyOf(strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./"))
		e := s.entries[name]
		if e == nil {
			// Not in the listing (which is the truth: nothing runs
			// between the two): not taken.
			continue
		}
		e.tarMode, e.inTar = h.Mode&0o7777, true
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Size < 0 || s.copied+h.Size > o.maxBytes {
				if o.tee != nil {
					return fmt.Errorf("read the workspace: %w", errTooBig)
				}
				// Past what one snapshot reads: the rest stays unread
				// (a diff reports such files changed), and the command
				// is stopped (its pipe closed).
				s.partial = true
				return nil
			}
			keep := o.keep != nil && kept+h.Size <= o.keepMax && o.keep(name, h.Size)
			sum, data, off, err := s.readFile(tr, h.Size, keep, o.store)
			if err != nil {
				return err
			}
			s.copied += h.Size
			e.Type, e.Size, e.Sum, e.Unread, e.off = "file", h.Size, sum, false, off
			// A name the stream holds twice (tar -c a a) takes its last
			// contents: what was kept of an earlier one goes.
			delete(s.kept, name)
			if keep {
				kept += h.Size
				s.kept[name] = data
			}
		case tar.TypeLink:
			// The same contents as a file earlier in the stream.
			if t := s.entries[strings.TrimPrefix(h.Linkname, "./")]; t != nil && t.Type == "file" && !t.Unread {
				e.Type, e.Size, e.Sum, e.Unread, e.off = "file", t.Size, t.Sum, false, t.off
				delete(s.kept, name)
				if d, ok := s.kept[strings.TrimPrefix(h.Linkname, "./")]; ok {
					s.kept[name] = d
				}
			}
		}
	}
}

// readFile hashes n bytes of r, keeping them or storing them as asked.
func (s *snapshot) readFile(r io.Reader, n int64, keep bool, store *blobStore) (sum [32]byte, data []byte, off int64, err error) {
	h := sha256.New()
	var w io.Writer = h
	var buf *bytes.Buffer
	if keep {
		buf = bytes.NewBuffer(make([]byte, 0, n))
		w = io.MultiWriter(h, buf)
	}
	if store != nil {
		off, err = store.put(io.TeeReader(io.LimitReader(r, n), w), n)
	} else {
		_, err = io.CopyN(w, r, n)
	}
	if err != nil {
		return sum, nil, 0, fmt.Errorf("read the workspace: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	if keep {
		data = buf.Bytes()
	}
	return sum, data, off, nil
}

// hasChildren returns the set of directories that have an entry below
// them, in one pass (a directory counts in a diff only when nothing below
// it explains it).
func hasChildren(m map[string]*Entry) map[string]bool {
	out := map[string]bool{}
	for p := range m {
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			out[p[:i]] = true
		}
	}
	return out
}
