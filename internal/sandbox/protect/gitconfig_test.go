package protect

import (
	"slices"
	"testing"
)

// gitConfigRunsCases are configuration files and whether git runs a
// program for them: the table of TestGitConfigRuns.
func gitConfigRunsCases() []struct {
	text string
	want bool
} {
	return []struct {
		text string
		want bool
	}{
		{"[core]\n\trepositoryformatversion = 0\n\tbare = false\n", false},
		{"[core]\n\thooksPath = /tmp\n", true},
		{"[Core]\n  FSMonitor=/tmp/x\n", true},
		{"[alias]\n\tst = !sh -c id\n", true},
		{"[filter \"lfs\"]\n\tclean = x\n", true},
		{"[user]\n\tname = a\n[core] sshCommand = x\n", true},
		{"# [core] hooksPath = x\n[user]\nemail = a@b\n", false},
		// Where GitConfigRuns used to read otherwise than git (and than
		// the guard's rewriting): a value continued on the next line
		// hides the header there, the quotes of a continued value go on,
		// a comment ends no continuation.
		{"[core]\n\tx = a \\\n[user]\n\thooksPath = /tmp\n", true},
		{"[core]\n\tx = \"a \\\n# b\" \\\n[user]\n\thooksPath = /tmp\n", true},
		{"[user]\n\tx = \"a \\\n# b\" \\\n[core]\n\thooksPath = /tmp\n", false},
		{"[user]\n\tname = a # not continued \\\n[core]\n\thooksPath = /tmp\n", true},
		{"[core]\n# a comment \\\n\thooksPath = /tmp\n", true},
		// What git reads and the line-by-line reading missed: a byte
		// order mark, headers one after another, a NUL byte in a
		// subsection (git's key stops there: core.hookspath).
		{"\xef\xbb\xbf[core] hooksPath = /tmp\n", true},
		{"[user][core]hooksPath=/tmp\n", true},
		{"[user] [core]\thooksPath\n", true},
		{"[core \"hookspath\x00\"] x = /tmp\n", true},
		{"[includeIf \"gitdir:/x/\"]\n\tpath = /tmp/c\n", true},
		{"[core]\r\n\thooksPath = /tmp\r\n", true},
		// What git refuses runs nothing, but a key git would read up to
		// the fault counts.
		{"[core ]\n\thooksPath = /tmp\n", false},
		{"[core]\n\thooksPath = \"/tmp\n", true},
		{"[core]\n\thooksPath = /tmp\\q\n", true},
		{"[user]\n\tname = a\n[core]\n\tbare\n", false},
	}
}

func TestGitConfigRuns(t *testing.T) {
	for _, tt := range gitConfigRunsCases() {
		if got := GitConfigRuns(tt.text); got != tt.want {
			t.Errorf("GitConfigRuns(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}

// TestGitConfigLines: each line's key, headers, continuation and whether
// git refuses it.
func TestGitConfigLines(t *testing.T) {
	for _, tt := range []struct {
		text string
		want []GitConfigLine
	}{
		{"[core]\n\tbare = false\n", []GitConfigLine{
			{Text: "[core]\n", Headers: "[core]"},
			{Text: "\tbare = false\n", Key: "core.bare"},
		}},
		{"[Filter \"LFS\"] Clean = x \\\n  y\n# c\n", []GitConfigLine{
			{Text: "[Filter \"LFS\"] Clean = x \\\n", Headers: "[Filter \"LFS\"]", Key: "filter.LFS.clean"},
			{Text: "  y\n", Key: "filter.LFS.clean", Continued: true},
			{Text: "# c\n"},
		}},
		{"[a.B]k\n[c \"d\\\"e\"]\n\tk = 1", []GitConfigLine{
			{Text: "[a.B]k\n", Headers: "[a.B]", Key: "a.b.k"},
			{Text: "[c \"d\\\"e\"]\n", Headers: "[c \"d\\\"e\"]"},
			{Text: "\tk = 1", Key: "c.d\"e.k"},
		}},
		{"\xef\xbb\xbf[a]\n\xef\xbb\xbf[b]\n", []GitConfigLine{
			{Text: "\xef\xbb\xbf[a]\n", Headers: "\xef\xbb\xbf[a]"},
			{Text: "\xef\xbb\xbf[b]\n", Bad: true},
		}},
		{"[a \"b\x00c\"]\n\tk = 1\n", []GitConfigLine{
			{Text: "[a \"b\x00c\"]\n", Headers: "[a \"b\x00c\"]"},
			{Text: "\tk = 1\n", Key: "a.b"},
		}},
		{"[a]\n\tk = \"x \\\n", []GitConfigLine{
			{Text: "[a]\n", Headers: "[a]"},
			{Text: "\tk = \"x \\\n", Key: "a.k", Bad: true},
		}},
		{"[a]\n\tk x\n[]\n!\n", []GitConfigLine{
			{Text: "[a]\n", Headers: "[a]"},
			{Text: "\tk x\n", Key: "a.k", Bad: true},
			{Text: "[]\n", Bad: true},
			{Text: "!\n", Bad: true},
		}},
	} {
		got := slices.Collect(GitConfigLines(tt.text))
		if !slices.Equal(got, tt.want) {
			t.Errorf("GitConfigLines(%q):\n got %+v\nwant %+v", tt.text, got, tt.want)
		}
	}
}
