package imagestore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// entry is one tar entry of a test layer.
type entry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	size     int64 // a file of size zeros (instead of body)
	devmajor int64
	pax      map[string]string
}

func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, typ: tar.TypeLink, link: to, mode: 0o644}
}
func zeros(name string, n int64) entry {
	return entry{name: name, typ: tar.TypeReg, size: n, mode: 0o644}
}

// tarStream writes entries as an uncompressed tar stream.
func tarStream(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: os.Getuid(), Gid: os.Getgid(), Devmajor: e.devmajor, PAXRecords: e.pax, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
			if e.size > 0 {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.size > 0 {
			if _, err := io.CopyN(tw, zeroReader{}, e.size); err != nil {
				t.Fatal(err)
			}
		} else if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// gzLayer is entries as a gzip-compressed layer.
func gzLayer(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(tarStream(t, entries...)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func layerOf(b []byte) UnpackLayer {
	return UnpackLayer{Digest: sha(b), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
}

// sandbox is a directory holding the image root and, beside it, a
// sentinel directory that nothing may touch.
type sandbox struct{ base, root, sentinel string }

func newSandbox(t *testing.T) sandbox {
	t.Helper()
	base := t.TempDir()
	s := sandbox{base: base, root: filepath.Join(base, "root"), sentinel: filepath.Join(base, "sentinel")}
	for _, d := range []string{s.root, s.sentinel} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.sentinel, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// untouched checks that nothing was written outside the image root.
func (s sandbox) untouched(t *testing.T) {
	t.Helper()
	var found []string
	filepath.WalkDir(s.base, func(p string, d fs.DirEntry, err error) error {
		if p == s.root {
			return filepath.SkipDir
		}
		if p != s.base {
			rel, _ := filepath.Rel(s.base, p)
			found = append(found, rel)
		}
		return nil
	})
	if !slices.Equal(found, []string{"sentinel", "sentinel/keep"}) {
		t.Errorf("outside the image root: %v", found)
	}
	if b, _ := os.ReadFile(filepath.Join(s.sentinel, "keep")); string(b) != "keep" {
		t.Errorf("sentinel changed: %q", b)
	}
}

func TestUnpackHostile(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		limits  Limits
		entry   string // the entry named
		want    error
	}{
		{"traversal", []entry{file("../evil", "x")}, Limits{}, "../evil", ErrTraversal},
		{"traversal inside a name", []entry{dir("a/"), file("a/../../sentinel/evil", "x")}, Limits{}, "a/../../sentinel/evil", ErrTraversal},
		{"symlink escape, then a write through it", []entry{symlink("esc", "../sentinel"), file("esc/pwned", "x")}, Limits{}, "esc/pwned", ErrSymlinkEscape},
		{"symlink escape deeper", []entry{dir("a/"), symlink("a/esc", "../../../../sentinel"), file("a/esc/pwned", "x")}, Limits{}, "a/esc/pwned", ErrSymlinkEscape},
		{"symlink loop", []entry{symlink("l1", "l2"), symlink("l2", "l1"), file("l1/x", "x")}, Limits{}, "l1/x", ErrSymlinkEscape},
		{"hard link outside", []entry{hardlink("h", "../sentinel/keep")}, Limits{}, "h", ErrHardlinkOutside},
		{"hard link through an escaping symlink", []entry{symlink("up", ".."), hardlink("h", "up/sentinel/keep")}, Limits{}, "h", ErrHardlinkOutside},
		{"hard link to a host path", []entry{hardlink("h", "/etc/passwd")}, Limits{}, "h", ErrHardlinkOutside},
		{"hard link to a directory", []entry{dir("d/"), hardlink("h", "d")}, Limits{}, "h", ErrHardlinkOutside},
		{"whiteout of ../x", []entry{file("../.wh.x", "")}, Limits{}, "../.wh.x", ErrTraversal},
		{"whiteout of ..", []entry{dir("a/"), file("a/.wh..", "")}, Limits{}, "a/.wh..", ErrBadWhiteout},
		{"file through a file", []entry{file("f", "x"), file("f/g", "y")}, Limits{}, "f/g", ErrNotDir},
		{"too many entries", []entry{file("1", ""), file("2", ""), file("3", ""), file("4", "")}, Limits{MaxEntries: 3}, "4", ErrTooManyEntries},
		{"file too large", []entry{file("big", strings.Repeat("x", 101))}, Limits{MaxFileBytes: 100}, "big", ErrFileTooLarge},
		{"files too large together", []entry{file("a", strings.Repeat("x", 60)), file("b", strings.Repeat("x", 60))}, Limits{MaxTotalBytes: 100}, "b", ErrImageTooLarge},
		{"decompression bomb", []entry{zeros("bomb", 8<<20)}, Limits{MaxLayerBytes: 1 << 20}, "bomb", ErrDecompressionBomb},
		{"overlong path", []entry{file(strings.Repeat("d/", 2100)+"f", "x")}, Limits{}, strings.Repeat("d/", 2100) + "f", ErrPathTooLong},
		{"overlong component", []entry{file(strings.Repeat("n", 256), "x")}, Limits{}, strings.Repeat("n", 256), ErrPathTooLong},
		{"overlong link target", []entry{symlink("l", strings.Repeat("t", 5000))}, Limits{}, "l", ErrPathTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := newSandbox(t)
			layer := gzLayer(t, tt.entries...)
			_, err := Unpack(context.Background(), sb.root, []UnpackLayer{layerOf(layer)}, UnpackOptions{Limits: tt.limits})
			var ee *EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("err %v, want an *EntryError", err)
			}
			if ee.Layer != sha(layer) || ee.Entry != tt.entry || !errors.Is(err, tt.want) {
				t.Errorf("got layer %s entry %q err %v; want %s %q %v", ee.Layer, ee.Entry, ee.Err, sha(layer), tt.entry, tt.want)
			}
			if !strings.Contains(err.Error(), sha(layer)) {
				t.Errorf("message %q does not name the layer", err)
			}
			sb.untouched(t)
		})
	}
}

// TestUnpackInsideRoot: absolute names and absolute links resolve inside
// the image root, as the kernel would resolve them in the sandbox.
func TestUnpackInsideRoot(t *testing.T) {
	sb := newSandbox(t)
	layer := gzLayer(t,
		dir("run/"), dir("var/"), symlink("var/run", "/run"), file("var/run/pidfile", "42"),
		file("/etc/abs", "abs"),
		symlink("host", sb.sentinel), file("host/pwned", "inside"),
		symlink("etc/rel", "../run"), file("etc/rel/viarel", "rel"),
		file("./dot/./f", "dot"),
		hardlink("etc/hl", "/etc/abs"),
	)
	if _, err := Unpack(context.Background(), sb.root, []UnpackLayer{layerOf(layer)}, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"run/pidfile": "42", "etc/abs": "abs", "run/viarel": "rel", "dot/f": "dot", "etc/hl": "abs",
		filepath.Join(strings.TrimPrefix(sb.sentinel, "/"), "pwned"): "inside",
	} {
		b, err := os.ReadFile(filepath.Join(sb.root, p))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	if l, _ := os.Readlink(filepath.Join(sb.root, "var/run")); l != "/run" {
		t.Errorf("var/run -> %q", l)
	}
	sb.untouched(t)
}

func TestUnpackLayers(t *testing.T) {
	sb := newSandbox(t)
	l1 := gzLayer(t, dir("a/"), file("a/f1", "1"), file("a/f2", "2"), dir("b/"), file("b/x", "x"), dir("b/sub/"), file("b/sub/y", "y"),
		file("orig", "one"), hardlink("linked", "orig"), file("gone", "g"), dir("ro/"), file("ro/f", "f"))
	l2 := tarStream(t, file("a/.wh.f1", ""), file("b/new", "new"), file("b/.wh..wh..opq", ""), file(".wh.gone", ""),
		file("orig", "two"), entry{name: "ro/", typ: tar.TypeDir, mode: 0o555})
	// A zstd layer too.
	var zb bytes.Buffer
	zw, err := zstd.NewWriter(&zb)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(tarStream(t, file("z", "zstd")))
	zw.Close()
	rep, err := Unpack(context.Background(), sb.root, []UnpackLayer{layerOf(l1), layerOf(l2), layerOf(zb.Bytes())}, UnpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(sb.root, p)); return err == nil }
	for p, want := range map[string]bool{"a/f1": false, "a/f2": true, "b/x": false, "b/sub": false, "b/new": true, "gone": false, "z": true, "ro/f": true} {
		if exists(p) != want {
			t.Errorf("%s exists: %v, want %v", p, !want, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(sb.root, "linked")); string(b) != "one" {
		t.Errorf("the lower layer's hard link changed with the file it linked: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(sb.root, "orig")); string(b) != "two" {
		t.Errorf("orig: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(sb.root, "ro")); fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: mode %v, want 0555 once unpacked", fi.Mode())
	}
	if len(rep.Skipped) != 0 {
		t.Errorf("skipped %v", rep.Skipped)
	}
	if err := removeTree(sb.root); err != nil {
		t.Errorf("removeTree: %v", err)
	}
}

func TestUnpackDiffID(t *testing.T) {
	sb := newSandbox(t)
	stream := tarStream(t, file("f", "x"))
	l := layerOf(gzLayer(t, file("f", "x")))
	l.DiffID = sha(stream)
	if _, err := Unpack(context.Background(), sb.root, []UnpackLayer{l}, UnpackOptions{}); err != nil {
		t.Fatalf("matching diff_id: %v", err)
	}
	l.DiffID = sha([]byte("other"))
	var dm *DigestMismatchError
	if _, err := Unpack(context.Background(), newSandbox(t).root, []UnpackLayer{l}, UnpackOptions{}); !errors.As(err, &dm) {
		t.Fatalf("err %v, want a diff_id mismatch", err)
	}
}

func TestUnpackDeviceAndSetuid(t *testing.T) {
	layer := gzLayer(t,
		entry{name: "dev/null", typ: tar.TypeChar, devmajor: 1, mode: 0o666},
		entry{name: "fifo", typ: tar.TypeFifo, mode: 0o644},
		entry{name: "suid", typ: tar.TypeReg, body: "s", mode: 0o4755},
		entry{name: "sgid/", typ: tar.TypeDir, mode: 0o2775},
		entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "capped", typ: tar.TypeReg, body: "c", mode: 0o755, pax: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "SCHILY.xattr.user.x": "y"}},
	)
	for _, keep := range []bool{false, true} {
		sb := newSandbox(t)
		rep, err := Unpack(context.Background(), sb.root, []UnpackLayer{layerOf(layer)}, UnpackOptions{KeepSetuid: keep})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Skipped) != 2 || rep.Skipped[0].Entry != "dev/null" || rep.Skipped[0].Layer != sha(layer) || !errors.Is(&rep.Skipped[0], ErrSkipped) {
			t.Errorf("skipped %v, want dev/null and fifo", rep.Skipped)
		}
		if _, err := os.Lstat(filepath.Join(sb.root, "dev/null")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("dev/null was made: %v", err)
		}
		suid, _ := os.Stat(filepath.Join(sb.root, "suid"))
		sgid, _ := os.Stat(filepath.Join(sb.root, "sgid"))
		tmp, _ := os.Stat(filepath.Join(sb.root, "tmp"))
		if got := suid.Mode()&fs.ModeSetuid != 0; got != keep {
			t.Errorf("keep %v: suid has mode %v", keep, suid.Mode())
		}
		if got := sgid.Mode()&fs.ModeSetgid != 0; got != keep {
			t.Errorf("keep %v: sgid has mode %v", keep, sgid.Mode())
		}
		if tmp.Mode()&fs.ModeSticky == 0 || tmp.Mode().Perm() != 0o777 {
			t.Errorf("tmp: mode %v, want sticky 0777", tmp.Mode())
		}
		if rep.DroppedXattrs != 1 {
			t.Errorf("dropped xattrs of %d entries, want 1", rep.DroppedXattrs)
		}
		if b, err := os.ReadFile(filepath.Join(sb.root, "capped")); err != nil || string(b) != "c" {
			t.Errorf("capped: %q %v", b, err)
		}
		if !keep && rep.DroppedSetuid != 2 {
			t.Errorf("dropped %d, want 2", rep.DroppedSetuid)
		}
		sb.untouched(t)
	}
}

func TestUnpackCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Unpack(ctx, newSandbox(t).root, []UnpackLayer{layerOf(gzLayer(t, file("f", "x")))}, UnpackOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestUnpackOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	layer := gzLayer(t,
		entry{name: "d/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "d/f", typ: tar.TypeReg, body: "f", mode: 0o4750},
		entry{name: "d/l", typ: tar.TypeSymlink, link: "f", mode: 0o777},
	)
	// tarStream writes the caller's uid; give them others.
	var buf bytes.Buffer
	zr, _ := gzip.NewReader(bytes.NewReader(layer))
	tr := tar.NewReader(zr)
	tw := tar.NewWriter(&buf)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		h.Uid, h.Gid = 1234, 5678
		tw.WriteHeader(h)
		io.Copy(tw, tr)
	}
	tw.Close()
	owned := buf.Bytes()
	for _, chown := range []bool{true, false} {
		sb := newSandbox(t)
		if _, err := Unpack(context.Background(), sb.root, []UnpackLayer{layerOf(owned)}, UnpackOptions{Chown: chown, KeepSetuid: true}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"d", "d/f", "d/l"} {
			fi, err := os.Lstat(filepath.Join(sb.root, p))
			if err != nil {
				t.Fatal(err)
			}
			uid, gid := owner(fi)
			want := [2]int{1234, 5678}
			if !chown {
				want = [2]int{os.Getuid(), os.Getgid()}
			}
			if [2]int{uid, gid} != want {
				t.Errorf("chown %v: %s owned by %d:%d, want %v", chown, p, uid, gid, want)
			}
		}
		// chown(2) clears setuid: the mode is set after the owner.
		if fi, _ := os.Stat(filepath.Join(sb.root, "d/f")); fi.Mode()&fs.ModeSetuid == 0 || fi.Mode().Perm() != 0o750 {
			t.Errorf("chown %v: d/f mode %v", chown, fi.Mode())
		}
	}
}
