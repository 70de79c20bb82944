package validate

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// Bounds of a request (the seed's figures).
const (
	MaxFiles     = 8
	MaxFileBytes = 64 << 10
	MaxAllBytes  = 256 << 10
	maxNameBytes = 255
)

// File is one inline source.
type File struct {
	Path    string `json:"path" jsonschema:"portable relative name, e.g. src/main.sh"`
	Content string `json:"content" jsonschema:"the file's UTF-8 text"`
}

// RefusedError is a request refused before anything was allocated.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// CheckFiles checks a request against k before anything is allocated:
// 1 to MaxFiles files, each at most MaxFileBytes of UTF-8 and MaxAllBytes
// in all, portable relative names (sandboxsession.CheckPath) of at most 255
// bytes with no segment beginning with "-" and no C1 control or
// bidirectional formatting character, no two equal or one inside another
// under Unicode case folding, each matching the kind's patterns.
func CheckFiles(k *Kind, files []File) error {
	refuse := func(f string, a ...any) error { return &RefusedError{Reason: fmt.Sprintf(f, a...)} }
	if len(files) == 0 || len(files) > MaxFiles {
		return refuse("%d files: 1 to %d per call", len(files), MaxFiles)
	}
	total := 0
	folded := map[string]string{}
	for _, f := range files {
		if len(f.Path) > maxNameBytes {
			return refuse("path of %d bytes: at most %d", len(f.Path), maxNameBytes)
		}
		if err := sandboxsession.CheckPath(f.Path); err != nil {
			return refuse("%v", err)
		}
		// A name is never an option: the validator's argv has an
		// end-of-options marker before the files, but not every
		// validator has one, and some pass names on to other tools.
		for seg := range strings.SplitSeq(f.Path, "/") {
			if strings.HasPrefix(seg, "-") {
				return refuse("path %q: a segment begins with \"-\" (it could be read as an option)", f.Path)
			}
		}
		if len(f.Content) > MaxFileBytes {
			return refuse("%s: %d bytes, at most %d per file", f.Path, len(f.Content), MaxFileBytes)
		}
		total += len(f.Content)
		if total > MaxAllBytes {
			return refuse("more than %d bytes in all", MaxAllBytes)
		}
		if !utf8.ValidString(f.Content) {
			return refuse("%s: not UTF-8 text", f.Path)
		}
		if strings.IndexByte(f.Content, 0) >= 0 {
			return refuse("%s: holds a NUL byte", f.Path)
		}
		low := fold(f.Path)
		for other, orig := range folded {
			if other == low || strings.HasPrefix(other, low+"/") || strings.HasPrefix(low, other+"/") {
				return refuse("%s and %s overlap (case ignored: Unicode case folding)", f.Path, orig)
			}
		}
		folded[low] = f.Path
		if !matchAny(k.Files, path.Base(f.Path)) {
			return refuse("%s: kind %s takes only %s", f.Path, k.Name, strings.Join(k.Files, " "))
		}
	}
	return nil
}

// fold is s with every rune replaced by the smallest rune of its Unicode
// simple case-folding orbit, so that two names a case-insensitive
// filesystem or reader would take for one fold to the same string:
// ſ (U+017F), s and S; K (Kelvin sign, U+212A), k and K.
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
