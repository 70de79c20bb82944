package session

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// Change is one difference between a baseline and a workspace.
type Change struct {
	Path string `json:"path"`
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
}

// DiffSummary counts the changes by kind.
type DiffSummary struct {
	Added    int `json:"added"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	Mode     int `json:"mode"`
	Type     int `json:"type"`
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

// diff compares snapshot now with base. Directories count only when
// nothing below them explains them (an empty directory made or removed).
func diff(base, now map[string]Entry, unified bool, maxUnified int) Diff {
	d := Diff{Changes: []Change{}}
	paths := map[string]bool{}
	for p := range base {
		paths[p] = true
	}
	for p := range now {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	hasChild := func(m map[string]Entry, dir string) bool {
		for p := range m {
			if strings.HasPrefix(p, dir+"/") {
				return true
			}
		}
		return false
	}
	var u strings.Builder
	for _, p := range sorted {
		b, inBase := base[p]
		n, inNow := now[p]
		var c *Change
		switch {
		case !inBase:
			if n.Type == "dir" && hasChild(now, p) {
				continue
			}
			c = &Change{Path: p, Kind: "added", Type: n.Type, Mode: octal(n.Mode), Target: n.Target, Size: int64(len(n.Data)), Binary: n.Type == "file" && isBinary(n.Data)}
			d.Summary.Added++
		case !inNow:
			if b.Type == "dir" && hasChild(base, p) {
				continue
			}
			c = &Change{Path: p, Kind: "deleted", Type: b.Type, OldMode: octal(b.Mode), OldTarget: b.Target, Size: int64(len(b.Data)), Binary: b.Type == "file" && isBinary(b.Data)}
			d.Summary.Deleted++
		case b.Type != n.Type:
			c = &Change{Path: p, Kind: "type", Type: n.Type, OldType: b.Type, Target: n.Target, OldTarget: b.Target, Size: int64(len(n.Data))}
			d.Summary.Type++
		case n.Type == "file" && string(b.Data) != string(n.Data):
			c = &Change{Path: p, Kind: "modified", Type: "file", Size: int64(len(n.Data)), Binary: isBinary(b.Data) || isBinary(n.Data)}
			if b.Mode != n.Mode {
				c.OldMode, c.Mode = octal(b.Mode), octal(n.Mode)
			}
			d.Summary.Modified++
		case n.Type == "symlink" && b.Target != n.Target:
			c = &Change{Path: p, Kind: "modified", Type: "symlink", OldTarget: b.Target, Target: n.Target}
			d.Summary.Modified++
		case b.Mode != n.Mode && n.Type != "symlink":
			c = &Change{Path: p, Kind: "mode", Type: n.Type, OldMode: octal(b.Mode), Mode: octal(n.Mode)}
			d.Summary.Mode++
		}
		if c == nil {
			continue
		}
		d.Changes = append(d.Changes, *c)
		if unified && !d.Truncated {
			hunk := unifiedHunk(p, b, inBase, n, inNow, c)
			if u.Len()+len(hunk) > maxUnified {
				d.Truncated = true
				continue
			}
			u.WriteString(hunk)
		}
	}
	d.Unified = u.String()
	return d
}

// unifiedHunk is the unified diff of one change.
func unifiedHunk(p string, b Entry, inBase bool, n Entry, inNow bool, c *Change) string {
	from, to := "a/"+p, "b/"+p
	if !inBase {
		from = "/dev/null"
	}
	if !inNow {
		to = "/dev/null"
	}
	text := func(e Entry, in bool) string {
		switch {
		case !in:
			return ""
		case e.Type == "symlink":
			return "-> " + e.Target + "\n"
		case e.Type == "file":
			return string(e.Data)
		}
		return ""
	}
	var head strings.Builder
	fmt.Fprintf(&head, "diff --soda %s %s\n", from, to)
	if c.OldMode != "" || c.Mode != "" {
		if c.OldMode != "" && c.Mode != "" {
			fmt.Fprintf(&head, "old mode %s\nnew mode %s\n", c.OldMode, c.Mode)
		}
	}
	if c.Binary {
		fmt.Fprintf(&head, "Binary files %s and %s differ\n", from, to)
		return head.String()
	}
	if (b.Type != "file" && b.Type != "symlink" && inBase) || (n.Type != "file" && n.Type != "symlink" && inNow) {
		return head.String() // a directory or a device: named, no hunk
	}
	a, bb := text(b, inBase), text(n, inNow)
	if a == bb {
		return head.String()
	}
	s, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(bb), FromFile: from, ToFile: to, Context: 3})
	if !strings.HasSuffix(s, "\n") && s != "" {
		s += "\n"
	}
	return head.String() + s
}

func octal(m int64) string { return fmt.Sprintf("%04o", m) }
