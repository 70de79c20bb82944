package sandboxsession

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Limits on names.
const (
	maxPathLen    = 4096
	maxSegmentLen = 255
)

// windowsDevices are names no portable path may use as a segment (with
// or without an extension): a workspace copied to another system must
// not hold them.
var windowsDevices = map[string]bool{"CON": true, "PRN": true, "AUX": true, "NUL": true,
	"COM1": true, "COM2": true, "COM3": true, "COM4": true, "COM5": true, "COM6": true, "COM7": true, "COM8": true, "COM9": true,
	"LPT1": true, "LPT2": true, "LPT3": true, "LPT4": true, "LPT5": true, "LPT6": true, "LPT7": true, "LPT8": true, "LPT9": true}

// CheckPath checks that p is a portable relative path inside the
// workspace: UTF-8, no NUL or control characters (C0 or C1), no
// bidirectional formatting characters, no backslash, not
// absolute, no empty, "." or ".." segment, no device name, segments of
// at most 255 bytes, at most 4096 bytes in all. The error names p.
func CheckPath(p string) error {
	bad := func(why string) error { return fmt.Errorf("path %q: %s", p, why) }
	switch {
	case p == "":
		return errors.New("path: empty")
	case len(p) > maxPathLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxPathLen))
	case !utf8.ValidString(p):
		return bad("not UTF-8")
	case strings.HasPrefix(p, "/"):
		return bad("absolute (paths are relative to the workspace)")
	case strings.ContainsRune(p, '\\'):
		return bad("holds a backslash")
	}
	for _, r := range p {
		switch {
		case r < 0x20 || r == 0x7f:
			return bad("holds a NUL or control character")
		case hidden(r):
			return bad(fmt.Sprintf("holds U+%04X, a control or bidirectional formatting character that hides what the name says", r))
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return bad("has an empty segment")
		case seg == "." || seg == "..":
			return bad("has a \".\" or \"..\" segment")
		case len(seg) > maxSegmentLen:
			return bad(fmt.Sprintf("has a segment longer than %d bytes", maxSegmentLen))
		}
		base, _, _ := strings.Cut(seg, ".")
		if windowsDevices[strings.ToUpper(strings.TrimRight(base, " "))] {
			return bad("uses a device name (" + seg + ")")
		}
	}
	if path.Clean(p) != p {
		return bad("not in clean form")
	}
	return nil
}

// hidden reports whether r is a C1 control character or a bidirectional
// formatting character: in a name, each makes what a reader sees differ
// from what the name is (a diff's reviewer, a validator's verdict).
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls
		return true
	case r >= 0x202a && r <= 0x202e: // LRE RLE PDF LRO RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI RLI FSI PDI
		return true
	}
	return r == 0x200e || r == 0x200f || r == 0x061c // LRM RLM ALM
}
