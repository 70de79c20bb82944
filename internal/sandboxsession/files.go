package sandboxsession

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
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

// decoded is a File checked and decoded, or a baseline file or
// directory to write back (contents in a store at off, n bytes long).
type decoded struct {
	path string
	data []byte
	mode int64
	dir  bool
	// stored: the contents are n bytes at off in a store, not data.
	stored bool
	off, n int64
}

func (d decoded) size() int64 {
	if d.stored {
		return d.n
	}
	return int64(len(d.data))
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

// tarOf builds a tar stream of files, their parent directories first
// (inline files of one call: bounded by the call's frame).
func tarOf(files []decoded) []byte {
	var buf bytes.Buffer
	_ = writeTar(&buf, files, nil)
	return buf.Bytes()
}

// writeTar writes a tar stream of files (their contents from f.data, or
// from store at f.off), their parent directories first, and dirs (with
// their modes) where given.
func writeTar(w io.Writer, files []decoded, store *blobStore) error {
	tw := tar.NewWriter(w)
	now := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		segs := strings.Split(f.path, "/")
		for i := 1; i < len(segs); i++ {
			d := strings.Join(segs[:i], "/")
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX}); err != nil {
					return err
				}
			}
		}
		if f.dir {
			if !dirs[f.path] {
				dirs[f.path] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: f.path + "/", Mode: f.mode, ModTime: now, Format: tar.FormatPAX}); err != nil {
					return err
				}
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: f.size(), ModTime: now, Format: tar.FormatPAX}); err != nil {
			return err
		}
		var r io.Reader = bytes.NewReader(f.data)
		if f.stored {
			r = store.reader(f.off, f.n)
		}
		if _, err := io.Copy(tw, r); err != nil {
			return err
		}
	}
	return tw.Close()
}

// isBinary says whether data is not UTF-8 text (or holds a NUL).
func isBinary(data []byte) bool {
	return bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data)
}
