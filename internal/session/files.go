package session

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Encodings of file contents.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// File is a file to seed or write: its workspace path, contents (UTF-8
// text, or base64 with Encoding base64) and mode (0: 0644; only the
// permission bits 0777 count).
type File struct {
	Path     string `json:"path" jsonschema:"portable path relative to the workspace, e.g. src/main.py"`
	Content  string `json:"content" jsonschema:"the file's contents: UTF-8 text, or base64 with encoding base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode     uint32 `json:"mode,omitempty" jsonschema:"permission bits, e.g. 493 (0755) for an executable; default 420 (0644)"`
}

// decoded is a File checked and decoded.
type decoded struct {
	path string
	data []byte
	mode int64
}

// decodeFiles checks and decodes fs: paths (CheckPath, no duplicates),
// encodings, modes, and the limits on count and total size.
func decodeFiles(fs []File, maxFiles int, maxBytes int64) ([]decoded, error) {
	if len(fs) > maxFiles {
		return nil, fmt.Errorf("%d files: at most %d per call", len(fs), maxFiles)
	}
	seen := map[string]bool{}
	var total int64
	out := make([]decoded, 0, len(fs))
	for _, f := range fs {
		if err := CheckPath(f.Path); err != nil {
			return nil, err
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("path %q: given twice", f.Path)
		}
		seen[f.Path] = true
		var data []byte
		switch f.Encoding {
		case "", EncodingUTF8:
			if !utf8.ValidString(f.Content) {
				return nil, fmt.Errorf("path %q: content is not UTF-8 (use encoding base64)", f.Path)
			}
			data = []byte(f.Content)
		case EncodingBase64:
			var err error
			if data, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				return nil, fmt.Errorf("path %q: content is not base64: %v", f.Path, err)
			}
		default:
			return nil, fmt.Errorf("path %q: unknown encoding %q (utf-8 or base64)", f.Path, f.Encoding)
		}
		if f.Mode&^0o777 != 0 {
			return nil, fmt.Errorf("path %q: mode %o: only permission bits (at most 0777)", f.Path, f.Mode)
		}
		mode := int64(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		total += int64(len(data))
		if total > maxBytes {
			return nil, fmt.Errorf("files of more than %d bytes in one call", maxBytes)
		}
		out = append(out, decoded{path: f.Path, data: data, mode: mode})
	}
	// A file may not also be another's directory.
	for _, d := range out {
		for p := d.path; strings.Contains(p, "/"); {
			p = p[:strings.LastIndexByte(p, '/')]
			if seen[p] {
				return nil, fmt.Errorf("path %q: %q is a file in the same call", d.path, p)
			}
		}
	}
	return out, nil
}

// Entry is one thing in a workspace snapshot.
type Entry struct {
	Type   string // "file", "symlink", "dir", "other"
	Mode   int64  // permission bits
	Data   []byte // a file's contents
	Target string // a symlink's target
}

// tarOf builds a tar stream of files, their parent directories first.
func tarOf(files []decoded) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		segs := strings.Split(f.path, "/")
		for i := 1; i < len(segs); i++ {
			d := strings.Join(segs[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX})
			}
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data)), ModTime: now, Format: tar.FormatPAX})
		_, _ = tw.Write(f.data)
	}
	_ = tw.Close()
	return buf.Bytes()
}

// errTooBig says that a tar stream from the sandbox held more than allowed.
var errTooBig = errors.New("more than the workspace can hold")

// parseTar reads a tar stream made in the sandbox (untrusted) into a
// snapshot keyed by clean relative path: at most maxEntries entries and
// maxBytes bytes of contents; names that are not portable paths are
// skipped and counted in skipped.
func parseTar(r io.Reader, maxEntries int, maxBytes int64) (snap map[string]Entry, skipped int, err error) {
	snap = map[string]Entry{}
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return snap, skipped, nil
		}
		if err != nil {
			return nil, skipped, fmt.Errorf("read the workspace: %w", err)
		}
		name := strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./")
		if name == "." || name == "" {
			continue
		}
		if CheckPath(name) != nil {
			skipped++
			continue
		}
		if len(snap) >= maxEntries {
			return nil, skipped, fmt.Errorf("read the workspace: more than %d entries", maxEntries)
		}
		e := Entry{Mode: h.Mode & 0o777}
		switch h.Typeflag {
		case tar.TypeReg:
			e.Type = "file"
			if h.Size < 0 || total+h.Size > maxBytes {
				return nil, skipped, fmt.Errorf("read the workspace: %w", errTooBig)
			}
			data, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return nil, skipped, fmt.Errorf("read the workspace: %w", err)
			}
			total += int64(len(data))
			e.Data = data
		case tar.TypeSymlink:
			e.Type, e.Target = "symlink", h.Linkname
		case tar.TypeDir:
			e.Type = "dir"
		case tar.TypeLink:
			// A hard link: the same contents as a file already read.
			e.Type = "file"
			if prev, ok := snap[strings.TrimPrefix(h.Linkname, "./")]; ok {
				e.Data = prev.Data
			}
		default:
			e.Type = "other"
		}
		snap[name] = e
	}
}

// isBinary says whether data is not UTF-8 text (or holds a NUL).
func isBinary(data []byte) bool {
	return bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data)
}
