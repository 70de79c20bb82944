package protect

import (
	"iter"
	"slices"
	"strings"
)

// GitRunsKeys are configuration keys (lowercase, as "section.key" or a
// section prefix) with which git runs a program or reads one more file.
var GitRunsKeys = []string{"core.hookspath", "core.fsmonitor", "core.sshcommand", "core.pager", "core.editor",
	"core.askpass", "core.gitproxy", "sequence.editor", "diff.external", "gpg.program", "credential.helper",
	"alias.", "filter.", "diff.", "merge.", "include.", "includeif.", "uploadpack.", "receive.procreceive"}

// GitConfigRuns says whether a git configuration file sets one of
// GitRunsKeys, as GitConfigLines reads it.
func GitConfigRuns(text string) bool {
	for l := range GitConfigLines(text) {
		if l.Runs() {
			return true
		}
	}
	return false
}

// GitConfigLine is one line of a git configuration file as git reads it
// (GitConfigLines).
type GitConfigLine struct {
	// Text is the line as the file holds it, its "\n" included (the last
	// line of a file that does not end in one has none).
	Text string
	// Headers is the start of Text up to the end of the section headers
	// ("[core]", `[filter "lfs"]`) that come before the line's key, ""
	// when the line opens no section.
	Headers string
	// Key is the key the line sets, or whose value it continues, as git
	// names it: section[.subsection].name, section and name in lower
	// case, cut at a NUL byte as git cuts it; "" when the line sets none
	// (blank, a comment, headers only, a line git refuses before a key).
	Key string
	// Continued says that the line continues the value of the line
	// before it (which ended in a backslash outside a comment).
	Continued bool
	// Bad says that git refuses the file at this line ("bad config
	// line"): git reads none of it, or, where errors are not fatal,
	// nothing from this line on. What follows is still read as git would
	// read it with the line's key and value removed.
	Bad bool
}

// ShortKey is the line's key as GitRunsKeys names keys: "section.name",
// the subsection left out ("filter.clean" for filter.lfs.clean).
func (l GitConfigLine) ShortKey() string { return shortKey(l.Key) }

// Runs says whether the line sets one of GitRunsKeys, or continues the
// value of one.
func (l GitConfigLine) Runs() bool {
	if l.Key == "" {
		return false
	}
	k := shortKey(l.Key)
	return slices.ContainsFunc(GitRunsKeys, func(r string) bool {
		return k == r || strings.HasSuffix(r, ".") && strings.HasPrefix(k, r)
	})
}

// shortKey is "section.name" of git's key section[.subsection].name.
func shortKey(key string) string {
	first, last := strings.IndexByte(key, '.'), strings.LastIndexByte(key, '.')
	if first < 0 || first == last {
		return key
	}
	return key[:first] + key[last:]
}

// GitConfigLines reads a git configuration file line by line, as git's
// own parser (config.c) reads it: a UTF-8 byte order mark at the start,
// any number of section headers on a line ("[a][b]k = v"), a quoted
// subsection (its backslash escapes, a NUL byte in it cutting the names
// of its keys as git's C strings cut them), comments, and values that a
// trailing backslash continues on the next line, quotes and comments in
// them included. "\r\n" ends a line as "\n" does. It is the one reading
// of soda's: GitConfigRuns and the repository guard's rewriting
// (sandboxinit) both use it, so that they never disagree.
func GitConfigLines(text string) iter.Seq[GitConfigLine] {
	const utf8BOM = "\xef\xbb\xbf"
	return func(yield func(GitConfigLine) bool) {
		r := gitConfigReader{}
		rest := text
		if strings.HasPrefix(rest, utf8BOM) {
			r.bom = len(utf8BOM)
		}
		for rest != "" {
			raw := rest
			if i := strings.IndexByte(rest, '\n'); i >= 0 {
				raw, rest = rest[:i+1], rest[i+1:]
			} else {
				rest = ""
			}
			l := r.line(raw)
			if rest == "" && r.quoted {
				// The file ends inside a quoted value (a continued
				// line): git reads the end as a newline in quotes.
				l.Bad = true
			}
			if !yield(l) {
				return
			}
			r.bom = 0
		}
	}
}

// gitConfigReader is GitConfigLines's state from one line to the next.
type gitConfigReader struct {
	// section is the name of the section in force, "section" or
	// "section.subsection" (git's var up to the key), "" before any.
	section string
	// key is the key whose value the next line continues ("": none);
	// quoted says the value is inside double quotes there.
	key    string
	quoted bool
	// bom is the length of the byte order mark that the line opens with
	// (the first line only).
	bom int
}

// line reads one line (raw, with its newline).
func (r *gitConfigReader) line(raw string) GitConfigLine {
	l := GitConfigLine{Text: raw}
	s := raw
	if strings.HasSuffix(s, "\n") {
		s = strings.TrimSuffix(s[:len(s)-1], "\r") // git reads "\r\n" as "\n"
	}
	if r.key != "" {
		l.Key, l.Continued = r.key, true
		l.Bad = r.value(s)
		return l
	}
	i := r.bom // a part of a byte order mark is a bad character, as to git
	for i < len(s) {
		c := s[i]
		switch {
		case isGitSpace(c):
			i++
		case c == '#' || c == ';':
			return l
		case c == '[':
			section, n, ok := gitHeader(s[i:])
			if !ok {
				l.Bad = true
				return l
			}
			r.section = section
			i += n
			l.Headers = raw[:i]
		case isGitAlpha(c):
			start := i
			for i < len(s) && isGitKeyChar(s[i]) {
				i++
			}
			name := asciiLower(s[start:i])
			key := name
			if r.section != "" {
				key = r.section + "." + name
			}
			if nul := strings.IndexByte(key, 0); nul >= 0 {
				key = key[:nul]
			}
			l.Key = key
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			switch {
			case i == len(s):
				// A key without a value (true).
			case s[i] == '=':
				r.quoted = false
				r.key = key
				l.Bad = r.value(s[i+1:])
			default:
				l.Bad = true
			}
			return l
		default:
			l.Bad = true
			return l
		}
	}
	return l
}

// value reads the part of a value on one line (s, without its newline)
// from the reader's quoting state. It leaves r.key set when the value
// goes on to the next line, and says whether git refuses it (an escape
// it does not know, a newline inside quotes).
func (r *gitConfigReader) value(s string) (bad bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return bad // continued: r.key stays
			}
			i++
			if !strings.ContainsRune(`tbn\"`, rune(s[i])) {
				bad = true
			}
		case c == '"':
			r.quoted = !r.quoted
		case (c == '#' || c == ';') && !r.quoted:
			r.key, r.quoted = "", false
			return bad
		}
	}
	if r.quoted {
		bad = true
	}
	r.key, r.quoted = "", false
	return bad
}

// gitHeader reads a section header at the start of s: "[name]" or
// `[name "subsection"]`. It returns git's var for it (name in lower
// case, then "." and the subsection unescaped), the header's length,
// and whether git accepts it.
func gitHeader(s string) (string, int, bool) {
	i := 1
	for i < len(s) && (isGitKeyChar(s[i]) || s[i] == '.') {
		i++
	}
	name := asciiLower(s[1:i])
	if i == len(s) {
		return "", 0, false
	}
	if s[i] == ']' {
		return name, i + 1, name != ""
	}
	if !isGitSpace(s[i]) {
		return "", 0, false
	}
	for i < len(s) && isGitSpace(s[i]) {
		i++
	}
	if i == len(s) || s[i] != '"' {
		return "", 0, false
	}
	var sub strings.Builder
	for i++; ; i++ {
		if i == len(s) {
			return "", 0, false
		}
		c := s[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			i++
			if i == len(s) {
				return "", 0, false
			}
			c = s[i]
		}
		sub.WriteByte(c)
	}
	i++
	if i == len(s) || s[i] != ']' {
		return "", 0, false
	}
	return name + "." + sub.String(), i + 1, true
}

// isGitSpace is git's isspace: space, tab, CR and LF (not VT or FF).
func isGitSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// isGitAlpha is git's isalpha (ASCII letters).
func isGitAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// isGitKeyChar is git's iskeychar: ASCII letters, digits and '-'.
func isGitKeyChar(c byte) bool { return isGitAlpha(c) || '0' <= c && c <= '9' || c == '-' }

// asciiLower is s with its ASCII letters in lower case, as git's tolower.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
