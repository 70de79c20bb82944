package sandboxsession

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		want string // "" ok
	}{
		{"src/main.go", ""},
		{".hidden/x", ""},
		{"a b/ü.txt", ""},
		{"", "empty"},
		{"/etc/passwd", "absolute"},
		{"../x", `".."`},
		{"a/../b", `".."`},
		{"a/./b", `".."`},
		{"a//b", "empty segment"},
		{"a/", "empty segment"},
		{"a\x00b", "NUL"},
		{"a\nb", "control"},
		{`a\b`, "backslash"},
		{"CON", "device"},
		{"x/nul.txt", "device"},
		{"x/COM1.tar.gz", "device"},
		{"x/console", ""},
		{strings.Repeat("a", 256), "segment longer"},
		{strings.Repeat("a/", 2049) + "b", "longer than"},
		{"\xff", "UTF-8"},
		{"a\u0085b", "U+0085"},
		{"evil\u202egnp.sh", "U+202E"},
		{"x\u2066y", "bidirectional"},
		{"\u200fname", "U+200F"},
		{"naïve/ü.txt", ""},
	}
	for _, tc := range tests {
		err := CheckPath(tc.path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckPath(%q) = %v, want ok", tc.path, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckPath(%q) = %v, want an error saying %q", tc.path, err, tc.want)
		}
	}
}

// listing makes what snapshotScript prints before its tar stream: the
// find listing (type, mode, size, target, path; recs), ended by an empty
// field.
func listing(recs ...[5]string) []byte {
	var b bytes.Buffer
	for _, r := range recs {
		for _, f := range r {
			b.WriteString(f)
			b.WriteByte(0)
		}
	}
	b.WriteByte(0)
	return b.Bytes()
}

func mkTar(hs ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		_ = tw.WriteHeader(h)
		if h.Size > 0 {
			_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	_ = tw.Close()
	return b.Bytes()
}

// TestSnapshotHostile: a snapshot from the sandbox is bounded; every name
// is kept, portable or not; the listing's modes win over the tar
// stream's (which saw entries made readable for the copy).
func TestSnapshotHostile(t *testing.T) {
	in := append(listing(
		[5]string{"f", "0", "3", "", "./ok"},
		[5]string{"f", "644", "1", "", "./aux.py"},
		[5]string{"f", "644", "1", "", "./bad\xffname"},
		[5]string{"l", "777", "11", "/etc/shadow", "./l"},
		[5]string{"s", "755", "0", "", "./sock"},
		[5]string{"d", "0", "4096", "", "./locked"},
		[5]string{"f", "400", "3", "", "./hard"},
	), mkTar(
		&tar.Header{Name: "./ok", Typeflag: tar.TypeReg, Size: 3, Mode: 0o400},
		&tar.Header{Name: "./aux.py", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		&tar.Header{Name: "./bad\xffname", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		&tar.Header{Name: "./hard", Typeflag: tar.TypeLink, Linkname: "./ok"},
		&tar.Header{Name: "./not-listed", Typeflag: tar.TypeReg, Size: 1},
	)...)
	s, err := snapshotOf(context.Background(), bytes.NewReader(in), snapOpts{maxBytes: 1 << 20, keep: func(string, int64) bool { return true }, keepMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ok := s.entries["ok"]
	if ok == nil || ok.Mode != 0 || ok.Unread || ok.Sum != sumOf([]byte("xxx")) || string(s.kept["ok"]) != "xxx" {
		t.Errorf("ok: %+v", ok)
	}
	for _, n := range []string{"aux.py", "bad\xffname", "sock", "locked", "l", "hard"} {
		if s.entries[n] == nil {
			t.Errorf("%q left out of the snapshot", n)
		}
	}
	if s.entries["l"].Type != "symlink" || s.entries["l"].Target != "/etc/shadow" || s.entries["sock"].Type != "other" || s.entries["locked"].Mode != 0 {
		t.Errorf("types/modes: l %+v sock %+v locked %+v", s.entries["l"], s.entries["sock"], s.entries["locked"])
	}
	if h := s.entries["hard"]; h.Sum != ok.Sum || h.Size != 3 {
		t.Errorf("a hard link did not take its target's contents: %+v", h)
	}
	if s.entries["not-listed"] != nil {
		t.Errorf("an entry of the tar stream that the listing lacks was taken")
	}
	// A name longer than any path: kept short, apart from its sibling.
	long := strings.Repeat("d/", 3000)
	ls := listing([5]string{"f", "644", "1", "", "./" + long + "a"}, [5]string{"f", "644", "1", "", "./" + long + "b"})
	s2, err := snapshotOf(context.Background(), bytes.NewReader(append(ls, mkTar()...)), snapOpts{maxBytes: 1024})
	if err != nil || len(s2.entries) != 2 {
		t.Fatalf("two long names: %v, %d entries", err, len(s2.entries))
	}
	for k, e := range s2.entries {
		if len(k) > 2*keptName || !e.LongName {
			t.Errorf("a long name kept as %d bytes, marked long %v", len(k), e.LongName)
		}
	}
	// A listing past its byte bound.
	var huge [][5]string
	for i := range 4000 {
		huge = append(huge, [5]string{"f", "644", "1", "", fmt.Sprintf("./%s%d", strings.Repeat("n/", 5000), i)})
	}
	if _, err := snapshotOf(context.Background(), bytes.NewReader(listing(huge...)), snapOpts{maxBytes: 1024}); err == nil || !strings.Contains(err.Error(), "listing is over") {
		t.Errorf("a 40 MB listing: %v, want it refused", err)
	}
	// Contents past the byte bound: read partly, the rest unread.
	part := append(listing([5]string{"f", "644", "600", "", "./a"}, [5]string{"f", "644", "600", "", "./b"}),
		mkTar(&tar.Header{Name: "./a", Typeflag: tar.TypeReg, Size: 600}, &tar.Header{Name: "./b", Typeflag: tar.TypeReg, Size: 600})...)
	s3, err := snapshotOf(context.Background(), bytes.NewReader(part), snapOpts{maxBytes: 1000})
	if err != nil || !s3.partial || s3.entries["a"].Unread || !s3.entries["b"].Unread {
		t.Errorf("contents past the bound: %v partial %v", err, s3 != nil && s3.partial)
	}
	big := append(listing([5]string{"f", "644", "2048", "", "./big"}), mkTar(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 2048})...)
	if s, err := snapshotOf(context.Background(), bytes.NewReader(big), snapOpts{maxBytes: 1024}); err != nil || !s.entries["big"].Unread {
		t.Errorf("a file past the byte bound was read: %v", err)
	}
	if _, err := snapshotOf(context.Background(), bytes.NewReader(big), snapOpts{maxBytes: 1024, tee: io.Discard}); !errors.Is(err, errTooBig) {
		t.Errorf("a copy past the byte bound: %v, want errTooBig", err)
	}
	var many [][5]string
	for i := range maxEntries + 1 {
		many = append(many, [5]string{"d", "755", "0", "", fmt.Sprintf("./d%d", i)})
	}
	if _, err := snapshotOf(context.Background(), bytes.NewReader(listing(many...)), snapOpts{maxBytes: 1024}); err == nil {
		t.Errorf("entries past the bound were read")
	}
	if _, err := snapshotOf(context.Background(), strings.NewReader("f\x00"), snapOpts{maxBytes: 1024}); err == nil {
		t.Errorf("a truncated listing was read")
	}
	// A file's size that is no size (found by FuzzSnapshot: a negative
	// one reached the diff, which reads that many bytes of the baseline).
	for _, size := range []string{"-5", "x", ""} {
		if _, err := snapshotOf(context.Background(), bytes.NewReader(listing([5]string{"f", "644", size, "", "./f"})), snapOpts{maxBytes: 1024}); err == nil || !strings.Contains(err.Error(), "size") {
			t.Errorf("a listed size %q: %v, want it refused", size, err)
		}
	}
	garbage := append(listing(), []byte(strings.Repeat("not a tar stream ", 40))...)
	if _, err := snapshotOf(context.Background(), bytes.NewReader(garbage), snapOpts{maxBytes: 1024}); err == nil {
		t.Errorf("garbage parsed as a tar stream")
	}
}

// TestSnapshotNamedTwice: a name the tar stream holds twice (tar -c a a)
// takes its last contents, and what was kept of the first goes with them
// (found by FuzzSnapshot: the kept contents were the first's, the size
// and digest the second's).
func TestSnapshotNamedTwice(t *testing.T) {
	for _, tt := range []struct {
		name    string
		second  *tar.Header
		size    int64
		kept    bool
		keepMax int64
	}{
		{"kept again", &tar.Header{Name: "./a", Typeflag: tar.TypeReg, Size: 5}, 5, true, 1 << 10},
		{"too big to keep again", &tar.Header{Name: "./a", Typeflag: tar.TypeReg, Size: 600}, 600, false, 512},
		{"then a link to a file kept", &tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./k"}, 5, true, 1 << 10},
		{"then a link to a file not kept", &tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./b"}, 600, false, 512},
		{"then a link to an unread file", &tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./u"}, 3, true, 1 << 10},
	} {
		in := append(listing([5]string{"f", "644", "3", "", "./a"}, [5]string{"f", "644", "5", "", "./k"}, [5]string{"f", "644", "600", "", "./b"}, [5]string{"f", "0", "9", "", "./u"}),
			mkTar(&tar.Header{Name: "./a", Typeflag: tar.TypeReg, Size: 3}, &tar.Header{Name: "./k", Typeflag: tar.TypeReg, Size: 5},
				&tar.Header{Name: "./b", Typeflag: tar.TypeReg, Size: 600}, tt.second)...)
		s, err := snapshotOf(context.Background(), bytes.NewReader(in), snapOpts{maxBytes: 1 << 12, keepMax: tt.keepMax, keep: func(string, int64) bool { return true }})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		e := s.entries["a"]
		data, kept := s.kept["a"]
		if e.Size != tt.size || kept != tt.kept || kept && (int64(len(data)) != e.Size || sumOf(data) != e.Sum) {
			t.Errorf("%s: entry %+v, kept %v (%d bytes)", tt.name, e, kept, len(data))
		}
	}
}

// diffFixture is a baseline in a store and a snapshot.
func diffFixture(t *testing.T, base, now map[string]string) diffIn {
	t.Helper()
	st, err := newBlobStore(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.close)
	entry := func(v string) *Entry {
		switch {
		case v == "dir":
			return &Entry{Type: "dir", Mode: 0o755}
		case strings.HasPrefix(v, "->"):
			return &Entry{Type: "symlink", Target: v[2:], Mode: 0o777}
		}
		mode := int64(0o644)
		if strings.HasPrefix(v, "x:") {
			mode, v = 0o755, v[2:]
		}
		return &Entry{Type: "file", Mode: mode, Size: int64(len(v)), Sum: sumOf([]byte(v))}
	}
	in := diffIn{base: map[string]*Entry{}, now: &snapshot{entries: map[string]*Entry{}, kept: map[string][]byte{}}, unified: true}
	for p, v := range base {
		e := entry(v)
		if e.Type == "file" {
			if e.off, err = st.putBytes([]byte(strings.TrimPrefix(v, "x:"))); err != nil {
				t.Fatal(err)
			}
		}
		in.base[p] = e
	}
	for p, v := range now {
		e := entry(v)
		in.now.entries[p] = e
		if e.Type == "file" {
			in.now.kept[p] = []byte(strings.TrimPrefix(v, "x:"))
		}
	}
	in.baseData = func(e *Entry) ([]byte, error) { return st.read(e.off, e.Size) }
	return in
}

func TestDiff(t *testing.T) {
	in := diffFixture(t,
		map[string]string{"a": "1\n", "b": "2\n", "c": "3\n", "d": "dir", "d/e": "x", "l": "->a", "bin": "\x00"},
		map[string]string{"a": "1\nmore\n", "c": "x:3\n", "d": "dir", "d/e": "->x", "l": "->c", "new": "n\n", "bin": "\x01", "empty": "dir", "con/x": "hidden\n", "bad\xff": "y"})
	d, err := diffOf(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "modified", "b": "deleted", "c": "mode", "d/e": "type", "l": "modified", "new": "added", "bin": "modified", "empty": "added", "con/x": "added", "bad\xff": "added"}
	got := map[string]string{}
	for _, c := range d.Changes {
		got[c.Path] = c.Kind
		switch c.Path {
		case "con/x":
			if !strings.Contains(c.Unaddressable, "device name") {
				t.Errorf("con/x: unaddressable %q", c.Unaddressable)
			}
		case "bad\xff":
			if c.PathBase64 != "YmFk/w==" || c.Unaddressable == "" {
				t.Errorf("a name that is not UTF-8: %+v", c)
			}
		}
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%q: %q, want %q", p, got[p], k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
	if s := d.Summary; s.Added != 4 || s.Modified != 3 || s.Deleted != 1 || s.Mode != 1 || s.Type != 1 || s.Unaddressable != 2 {
		t.Errorf("summary %+v", s)
	}
	for _, w := range []string{"+more", "--- a/b\n+++ /dev/null", "Binary files a/bin and b/bin differ", "old mode 0644\nnew mode 0755"} {
		if !strings.Contains(d.Unified, w) {
			t.Errorf("unified lacks %q:\n%s", w, d.Unified)
		}
	}
}

// TestDiffBounded: the host's work for a diff is bounded whatever the
// agent made: many directories (quadratic before: 20k empty directories
// took 18 s), long files of repeated lines (a quadratic line diff took
// 67 s of CPU for 16k lines), files past the line-diff bound.
func TestDiffBounded(t *testing.T) {
	base, now := map[string]string{}, map[string]string{}
	for i := range 60000 {
		now[fmt.Sprintf("d%05d", i)] = "dir"
	}
	var x, y strings.Builder
	for i := range 40000 {
		fmt.Fprintf(&x, "line %d\n", i%7)
		fmt.Fprintf(&y, "line %d\n", i%11)
	}
	base["long"], now["long"] = x.String(), y.String()
	base["huge"], now["huge"] = strings.Repeat("a\n", maxLineDiff), strings.Repeat("b\n", maxLineDiff)
	in := diffFixture(t, base, now)
	delete(in.now.kept, "huge") // the snapshot keeps nothing past the bound
	t0 := time.Now()
	d, err := diffOf(context.Background(), in)
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("60000 directories, a 40000-line file of repeated lines and a %d-byte one: %s", 2*maxLineDiff, took)
	if took > 20*time.Second {
		t.Errorf("the diff took %s", took)
	}
	if d.Summary.Added != 60000 || d.Summary.Modified != 2 {
		t.Errorf("summary %+v", d.Summary)
	}
	for _, c := range d.Changes {
		if c.Path == "huge" && c.NoLineDiff == "" {
			t.Errorf("a file past the line-diff bound has no reason for its missing hunk: %+v", c)
		}
	}
	if len(d.Unified) > maxUnified {
		t.Errorf("unified output of %d bytes", len(d.Unified))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := diffOf(ctx, in); err == nil {
		t.Errorf("a cancelled diff went on")
	}
}

func TestStore(t *testing.T) {
	st, err := newBlobStore(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	a, _ := st.putBytes([]byte("hello"))
	b, _ := st.putBytes([]byte("hello"))
	if a != b || st.Size() != 5 {
		t.Errorf("the same contents stored twice: %d %d size %d", a, b, st.Size())
	}
	if _, err := st.putBytes([]byte("world!")); err == nil {
		t.Errorf("a put past the bound was taken")
	}
	if got, _ := st.read(a, 5); string(got) != "hello" {
		t.Errorf("read %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Dir(st.f.Name())); len(ents) != 0 {
		t.Errorf("the store left a name behind: %v", ents)
	}
}

func TestDecodeFiles(t *testing.T) {
	if _, err := decodeFiles([]File{{Path: "a", Content: "x"}, {Path: "a/b", Content: "y"}}, 10, 100); err == nil {
		t.Errorf("a file that is also another's directory was accepted")
	}
	if _, err := decodeFiles([]File{{Path: "a", Content: "x"}, {Path: "a", Content: "y"}}, 10, 100); err == nil {
		t.Errorf("a path given twice was accepted")
	}
	if _, err := decodeFiles([]File{{Path: "a", Content: strings.Repeat("x", 101)}}, 10, 100); err == nil {
		t.Errorf("files past the size bound were accepted")
	}
	if _, err := decodeFiles(make([]File, 11), 10, 100); err == nil {
		t.Errorf("files past the count bound were accepted")
	}
}

// FuzzSnapshot reads what a snapshot command prints (the listing, then
// the tar stream) as the session does: bounded (entries, contents read,
// contents kept), every entry of a known type and mode, a size that is
// never negative, a name no longer than a path or marked long; the
// contents kept are the file's, by its digest; a failure says what it
// read. An input is raw bytes, or, when spec is not empty, its listing
// followed by a tar stream that spec makes of the listed names (see
// specTar): mutations of a raw tar stream seldom stay one.
func FuzzSnapshot(f *testing.F) {
	hostile := listing(
		[5]string{"f", "0", "3", "", "./ok"},
		[5]string{"l", "777", "11", "/etc/shadow", "./l"},
		[5]string{"s", "755", "0", "", "./sock"},
		[5]string{"d", "0", "4096", "", "./locked"},
		[5]string{"f", "400", "3", "", "./hard"},
	)
	f.Add(append(hostile, mkTar(
		&tar.Header{Name: "./ok", Typeflag: tar.TypeReg, Size: 3, Mode: 0o400},
		&tar.Header{Name: "./hard", Typeflag: tar.TypeLink, Linkname: "./ok"},
		&tar.Header{Name: "./not-listed", Typeflag: tar.TypeReg, Size: 1},
	)...), []byte(nil))
	f.Add(hostile, []byte{0, 0, 3, 4, 1, 4, 3, 2, 0})
	part := listing([5]string{"f", "644", "600", "", "./a"}, [5]string{"f", "644", "600", "", "./b"})
	f.Add(append(part, mkTar(&tar.Header{Name: "./a", Typeflag: tar.TypeReg, Size: 600}, &tar.Header{Name: "./b", Typeflag: tar.TypeReg, Size: 600})...), []byte(nil))
	f.Add(part, []byte{0, 8, 100, 1, 0, 100})
	f.Add(append(listing([5]string{"f", "644", "2048", "", "./big"}), mkTar(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 2048})...), []byte(nil))
	f.Add(append(listing(), []byte(strings.Repeat("not a tar stream ", 40))...), []byte(nil))
	f.Add([]byte("f\x00"), []byte(nil))
	f.Add(listing([5]string{"f", "644", "-5", "", "./neg"}, [5]string{"f", "644", "x", "", "./odd"}), []byte{1, 0, 1})
	f.Fuzz(func(t *testing.T, in, spec []byte) {
		if len(spec) > 0 {
			in = specTar(in, spec)
		}
		const maxBytes, keepMax = 1 << 12, 1 << 10
		s, err := snapshotOf(context.Background(), bytes.NewReader(in), snapOpts{maxBytes: maxBytes, keepMax: keepMax,
			keep: func(string, int64) bool { return true }})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "read the workspace") {
				t.Fatalf("snapshotOf: %v (does not say what failed)", err)
			}
			return
		}
		if len(s.entries) > maxEntries || s.copied < 0 || s.copied > maxBytes {
			t.Fatalf("%d entries, %d bytes of contents", len(s.entries), s.copied)
		}
		for name, e := range s.entries {
			switch {
			case name == "" || len(name) > maxPathLen && !e.LongName || e.LongName && len(name) > keptName+100:
				t.Fatalf("entry named %q", name)
			case e.Mode < 0 || e.Mode > 0o7777 || e.Size < 0:
				t.Fatalf("%q: mode %o, size %d", name, e.Mode, e.Size)
			case e.Type != "file" && e.Type != "dir" && e.Type != "symlink" && e.Type != "other":
				t.Fatalf("%q: type %q", name, e.Type)
			}
		}
		for name, data := range s.kept {
			e := s.entries[name]
			if e == nil || e.Type != "file" || e.Unread || e.Size != int64(len(data)) || e.Sum != sumOf(data) {
				t.Fatalf("kept %q (%d bytes) for %+v", name, len(data), e)
			}
		}
	})
}

// specTar is the listing that in opens with, followed by a tar stream of
// its names made from spec, three bytes an entry: which name (a), the
// kind (b: a regular file, a hard link or a directory; with or without
// "./"; PAX or GNU), and the size in 37-byte steps or which name a link
// names (c). A listing that does not read leaves in as it is.
func specTar(in, spec []byte) []byte {
	br := bufio.NewReaderSize(bytes.NewReader(in), 64<<10)
	entries := map[string]*Entry{}
	if readListing(br, entries, maxEntries) != nil || len(entries) == 0 {
		return in
	}
	names := slices.Sorted(maps.Keys(entries))
	out := slices.Clone(in[:len(in)-br.Buffered()])
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for ; len(spec) >= 3; spec = spec[3:] {
		name, kind, n := names[int(spec[0])%len(names)], spec[1], int(spec[2])
		h := &tar.Header{Name: name, Mode: 0o644, Format: tar.FormatPAX}
		if kind&4 != 0 {
			h.Name = "./" + name
		}
		if kind&8 != 0 {
			h.Format = tar.FormatGNU
		}
		switch kind % 3 {
		case 0:
			h.Typeflag, h.Size = tar.TypeReg, int64(n)*37
		case 1:
			h.Typeflag, h.Linkname = tar.TypeLink, "./"+names[n%len(names)]
		default:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		}
		if tw.WriteHeader(h) != nil {
			return in
		}
		_, _ = tw.Write(bytes.Repeat([]byte{kind}, int(h.Size)))
	}
	_ = tw.Close()
	return append(out, b.Bytes()...)
}
