package sandboxsession

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/diff"
)

// Bounds of a diff's host work. Every change is listed; a line diff is
// made only for text files of at most maxLineDiff bytes on each side,
// while the unified output stays under maxUnified. The line diff is an
// anchored diff, O(n log n) in the lines (rogpeppe/go-internal/diff, the
// Go toolchain's own), so a file of hostile lines costs no more than a
// plain one.
const (
	maxLineDiff = 1 << 20
	maxUnified  = 4 << 20
	// maxKept bounds the workspace contents one diff keeps in memory for
	// its line diffs.
	maxKept = 16 << 20
)

// Change is one difference between a baseline and a workspace.
type Change struct {
	// Path is the entry's name. A name that is not UTF-8 has its exact
	// bytes in PathBase64 (Path then shows them as U+FFFD).
	Path       string `json:"path"`
	PathBase64 string `json:"path_base64,omitempty"`
	// Unaddressable says why a client cannot name this entry in a call
	// (it is not a portable path: a device name, a backslash, a control
	// character, not UTF-8); it is listed all the same.
	Unaddressable string `json:"unaddressable,omitempty"`
	// Kind is added, modified, deleted, mode (permission bits only) or
	// type (a file became a symlink, ...).
	Kind string `json:"kind"`
	// Type is what the path is now (deleted: what it was): file, symlink,
	// dir or other.
	Type string `json:"type"`
	// OldType is what a type change was.
	OldType string `json:"old_type,omitempty"`
	OldMode string `json:"old_mode,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// OldTarget and Target are a symlink's.
	OldTarget string `json:"old_target,omitempty"`
	Target    string `json:"target,omitempty"`
	// Binary marks a file that is not UTF-8 text (no unified hunk).
	Binary bool `json:"binary,omitempty"`
	// Size is the file's size now (deleted: before).
	Size int64 `json:"size,omitempty"`
	// NoLineDiff says why a unified diff has no hunk for this text file
	// (too large, the output limit reached).
	NoLineDiff string `json:"no_line_diff,omitempty"`
	// Unreadable marks a file whose contents could not be read.
	Unreadable bool `json:"unreadable,omitempty"`
}

// DiffSummary counts the changes by kind.
type DiffSummary struct {
	Added    int `json:"added"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	Mode     int `json:"mode"`
	Type     int `json:"type"`
	// Unaddressable counts the changes a client cannot name.
	Unaddressable int `json:"unaddressable,omitempty"`
}

// Diff is a workspace against its baseline.
type Diff struct {
	Summary DiffSummary `json:"summary"`
	Changes []Change    `json:"changes"`
	// Unified is the unified diff (format unified), text files only;
	// binary ones are named ("Binary files a/X and b/X differ").
	Unified string `json:"unified,omitempty"`
	// Truncated is set when Unified was cut at the output limit.
	Truncated bool `json:"truncated,omitempty"`
}

// diffIn is what a diff compares.
type diffIn struct {
	base map[string]*Entry
	// baseData reads a baseline file's contents (for a line diff).
	baseData func(e *Entry) ([]byte, error)
	now      *snapshot
	unified  bool
}

// wantLines says whether a line diff of path could be made from the
// baseline's side, so that the snapshot keeps the workspace's side.
func wantLines(base map[string]*Entry) func(name string, size int64) bool {
	return func(name string, size int64) bool {
		if size > maxLineDiff {
			return false
		}
		b := base[name]
		return b == nil || b.Type != "file" || b.Size <= maxLineDiff
	}
}

// diffOf compares a snapshot with a baseline. Directories count only
// when nothing below them explains them (an empty directory made or
// removed).
func diffOf(ctx context.Context, in diffIn) (Diff, error) {
	d := Diff{Changes: []Change{}}
	base, now := in.base, in.now.entries
	paths := make([]string, 0, len(base)+len(now))
	for p := range base {
		paths = append(paths, p)
	}
	for p := range now {
		if _, ok := base[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	baseKids, nowKids := hasChildren(base), hasChildren(now)
	var u strings.Builder
	for i, p := range paths {
		if i%1024 == 0 && ctx.Err() != nil {
			return Diff{}, ctx.Err()
		}
		b, n := base[p], now[p]
		var c *Change
		switch {
		case b == nil:
			if n.Type == "dir" && nowKids[p] {
				continue
			}
			c = &Change{Kind: "added", Type: n.Type, Mode: modeOf(n), Target: n.Target, Size: n.Size, Unreadable: n.Unread}
			d.Summary.Added++
		case n == nil:
			if b.Type == "dir" && baseKids[p] {
				continue
			}
			c = &Change{Kind: "deleted", Type: b.Type, OldMode: modeOf(b), OldTarget: b.Target, Size: b.Size}
			d.Summary.Deleted++
		case b.Type != n.Type:
			c = &Change{Kind: "type", Type: n.Type, OldType: b.Type, Target: n.Target, OldTarget: b.Target, Size: n.Size}
			d.Summary.Type++
		case n.Type == "file" && (n.Unread || b.Sum != n.Sum):
			c = &Change{Kind: "modified", Type: "file", Size: n.Size, Unreadable: n.Unread}
			if b.Mode != n.Mode {
				c.OldMode, c.Mode = octal(b.Mode), octal(n.Mode)
			}
			d.Summary.Modified++
		case n.Type == "symlink" && b.Target != n.Target:
			c = &Change{Kind: "modified", Type: "symlink", OldTarget: b.Target, Target: n.Target}
			d.Summary.Modified++
		case b.Mode != n.Mode && n.Type != "symlink":
			c = &Change{Kind: "mode", Type: n.Type, OldMode: octal(b.Mode), Mode: octal(n.Mode)}
			d.Summary.Mode++
		}
		if c == nil {
			continue
		}
		c.Path = p
		if !utf8.ValidString(p) {
			c.PathBase64 = base64.StdEncoding.EncodeToString([]byte(p))
		}
		switch err := CheckPath(p); {
		case n != nil && n.LongName:
			c.Unaddressable = fmt.Sprintf("longer than %d bytes (shown shortened, with its length and digest)", maxPathLen)
			d.Summary.Unaddressable++
		case err != nil:
			c.Unaddressable = strings.TrimPrefix(err.Error(), fmt.Sprintf("path %q: ", p))
			d.Summary.Unaddressable++
		}
		if c.Type == "file" || c.OldType == "file" {
			c.Binary = in.binary(p, b, n)
		}
		if in.unified && !d.Truncated {
			hunk := in.hunk(p, b, n, c)
			if u.Len()+len(hunk) > maxUnified {
				d.Truncated = true
			} else {
				u.WriteString(hunk)
			}
		}
		d.Changes = append(d.Changes, *c)
	}
	d.Unified = u.String()
	return d, nil
}

// binary says whether either side of a file change is known not to be
// text (only what was read can tell).
func (in diffIn) binary(p string, b, n *Entry) bool {
	if n != nil && n.Type == "file" {
		if data, ok := in.now.kept[p]; ok && isBinary(data) {
			return true
		}
	}
	if b != nil && b.Type == "file" && b.Size <= maxLineDiff && in.baseData != nil {
		if data, err := in.baseData(b); err == nil && isBinary(data) {
			return true
		}
	}
	return false
}

// hunk is the unified diff of one change.
func (in diffIn) hunk(p string, b, n *Entry, c *Change) string {
	from, to := "a/"+p, "b/"+p
	if b == nil {
		from = "/dev/null"
	}
	if n == nil {
		to = "/dev/null"
	}
	var head strings.Builder
	fmt.Fprintf(&head, "diff --soda %s %s\n", from, to)
	if c.OldMode != "" && c.Mode != "" {
		fmt.Fprintf(&head, "old mode %s\nnew mode %s\n", c.OldMode, c.Mode)
	}
	if c.Binary {
		fmt.Fprintf(&head, "Binary files %s and %s differ\n", from, to)
		return head.String()
	}
	side := func(e *Entry, now bool) (string, bool) {
		switch {
		case e == nil:
			return "", true
		case e.Type == "symlink":
			return "-> " + e.Target + "\n", true
		case e.Type != "file":
			return "", false
		case now:
			data, ok := in.now.kept[p]
			return string(data), ok
		case e.Size > maxLineDiff || in.baseData == nil:
			return "", false
		}
		data, err := in.baseData(e)
		return string(data), err == nil
	}
	if (b != nil && b.Type != "file" && b.Type != "symlink") || (n != nil && n.Type != "file" && n.Type != "symlink") {
		return head.String() // a directory or a device: named, no hunk
	}
	x, okx := side(b, false)
	y, oky := side(n, true)
	if !okx || !oky {
		c.NoLineDiff = fmt.Sprintf("no line diff: a side is larger than %d bytes, unreadable, or past what one diff reads", maxLineDiff)
		return head.String()
	}
	if x == y {
		return head.String()
	}
	out := diff.Diff(from, []byte(x), to, []byte(y))
	// Drop the library's own "diff a b" line: ours is above.
	if i := strings.IndexByte(string(out), '\n'); i >= 0 && strings.HasPrefix(string(out), "diff ") {
		out = out[i+1:]
	}
	s := string(out)
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return head.String() + s
}

func modeOf(e *Entry) string {
	if e.Type == "symlink" {
		return ""
	}
	return octal(e.Mode)
}

func octal(m int64) string { return fmt.Sprintf("%04o", m) }
