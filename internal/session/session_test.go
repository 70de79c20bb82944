package session

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
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

// TestParseTarHostile: a tar stream from the sandbox is bounded and its
// names checked.
func TestParseTarHostile(t *testing.T) {
	mk := func(hs ...*tar.Header) []byte {
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
	snap, skipped, err := parseTar(bytes.NewReader(mk(
		&tar.Header{Name: "./ok", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1},
		&tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Size: 1},
		&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"},
		&tar.Header{Name: "dev", Typeflag: tar.TypeChar},
	)), 100, 1<<20)
	if err != nil || skipped != 2 || string(snap["ok"].Data) != "xxx" || snap["l"].Type != "symlink" || snap["l"].Target != "/etc/shadow" || snap["dev"].Type != "other" {
		t.Errorf("parseTar = %+v, skipped %d, %v", snap, skipped, err)
	}
	if _, _, err := parseTar(bytes.NewReader(mk(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 2048})), 100, 1024); err == nil {
		t.Errorf("a file past the byte bound was read")
	}
	if _, _, err := parseTar(bytes.NewReader(mk(&tar.Header{Name: "a", Typeflag: tar.TypeDir}, &tar.Header{Name: "b", Typeflag: tar.TypeDir})), 1, 1024); err == nil {
		t.Errorf("entries past the bound were read")
	}
	if _, _, err := parseTar(strings.NewReader("not a tar stream at all, but long enough to be read as a header block........"), 10, 1024); err == nil {
		t.Errorf("garbage parsed as a tar stream")
	}
}

func TestDiff(t *testing.T) {
	f := func(data string, mode int64) Entry { return Entry{Type: "file", Data: []byte(data), Mode: mode} }
	base := map[string]Entry{"a": f("1\n", 0o644), "b": f("2\n", 0o644), "c": f("3\n", 0o644), "d": {Type: "dir", Mode: 0o755}, "d/e": f("x", 0o644), "l": {Type: "symlink", Target: "a"}, "bin": f("\x00", 0o644)}
	now := map[string]Entry{"a": f("1\nmore\n", 0o644), "c": f("3\n", 0o755), "d": {Type: "dir", Mode: 0o755}, "d/e": {Type: "symlink", Target: "x"},
		"l": {Type: "symlink", Target: "c"}, "new": f("n\n", 0o644), "bin": f("\x01", 0o644), "empty": {Type: "dir", Mode: 0o755}}
	d := diff(base, now, true, 1<<20)
	want := map[string]string{"a": "modified", "b": "deleted", "c": "mode", "d/e": "type", "l": "modified", "new": "added", "bin": "modified", "empty": "added"}
	got := map[string]string{}
	for _, c := range d.Changes {
		got[c.Path] = c.Kind
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q", p, got[p], k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
	if s := d.Summary; s.Added != 2 || s.Modified != 3 || s.Deleted != 1 || s.Mode != 1 || s.Type != 1 {
		t.Errorf("summary %+v", s)
	}
	for _, w := range []string{"+more", "--- a/b\n+++ /dev/null", "Binary files a/bin and b/bin differ", "old mode 0644\nnew mode 0755"} {
		if !strings.Contains(d.Unified, w) {
			t.Errorf("unified lacks %q:\n%s", w, d.Unified)
		}
	}
	if d := diff(base, now, true, 10); !d.Truncated {
		t.Errorf("a unified diff past its bound is not marked truncated")
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
