package protect

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// gitConfigRunsCases are configuration files and whether git runs a
// program for them: the table of TestGitConfigRuns and the seeds of the
// fuzz targets.
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

// FuzzGitConfigLines checks the reading's own properties: the lines are
// the text, cut after each "\n"; headers start their line; a continued
// line goes on with the key before it; GitConfigRuns is whether a line
// runs; and removing one key and the lines that continue its value (as
// the repository guard removes them, headers kept) changes the reading of
// no other line, so that a rewritten file runs nothing that the reading
// did not find.
func FuzzGitConfigLines(f *testing.F) {
	for _, tt := range gitConfigRunsCases() {
		f.Add(tt.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		lines := slices.Collect(GitConfigLines(text))
		var joined strings.Builder
		runs := false
		for i, l := range lines {
			joined.WriteString(l.Text)
			if nl := strings.IndexByte(l.Text, '\n'); nl >= 0 && nl != len(l.Text)-1 || nl < 0 && i != len(lines)-1 || l.Text == "" {
				t.Fatalf("line %d is %q", i, l.Text)
			}
			if !strings.HasPrefix(l.Text, l.Headers) || l.Headers != "" && (!strings.HasSuffix(l.Headers, "]") || l.Continued) {
				t.Fatalf("line %d: headers %q of %q", i, l.Headers, l.Text)
			}
			if l.Continued && (i == 0 || l.Key == "" || lines[i-1].Key != l.Key) {
				t.Fatalf("line %d continues no value: %+v after %+v", i, l, lines[max(i-1, 0)])
			}
			runs = runs || l.Runs()
		}
		if joined.String() != text {
			t.Fatalf("the lines make %q", joined.String())
		}
		if GitConfigRuns(text) != runs {
			t.Fatalf("GitConfigRuns = %v, a line runs: %v", !runs, runs)
		}
		checked := 0
		for k, l := range lines {
			if l.Key == "" || l.Continued || k == 0 && l.Headers == "" || checked == 32 {
				continue // (a first line's byte order mark stays first)
			}
			checked++
			end := k + 1
			for end < len(lines) && lines[end].Continued {
				end++
			}
			var b strings.Builder
			for _, o := range lines[:k] {
				b.WriteString(o.Text)
			}
			if l.Headers != "" {
				b.WriteString(l.Headers + "\n")
			}
			for _, o := range lines[end:] {
				b.WriteString(o.Text)
			}
			got := slices.Collect(GitConfigLines(b.String()))
			want := slices.Clone(lines[:k])
			if l.Headers != "" {
				want = append(want, GitConfigLine{Text: l.Headers + "\n", Headers: l.Headers})
			}
			want = append(want, lines[end:]...)
			if !slices.Equal(got, want) {
				t.Fatalf("without lines %d to %d (%q), the reading changes:\n got %+v\nwant %+v", k, end-1, l.Key, got, want)
			}
		}
	})
}

// FuzzGitConfigGit compares the reading with git's own (git config
// --list): every file git accepts has the keys the reading finds, in the
// same order, and no line the reading says git refuses; every file git
// refuses has one. It needs git (skipped without).
func FuzzGitConfigGit(f *testing.F) {
	if _, err := exec.LookPath("git"); err != nil {
		f.Skip("no git")
	}
	for _, tt := range gitConfigRunsCases() {
		f.Add(tt.text)
	}
	f.Add("[a \"b\x00c\"] k = 1\n[d]\n\t\xef\xbb\xbf = 2\n")
	f.Add("[a]\n\tk = \\\r\n[b]\r\n\tj = \"\\t\\\"\"\r\n")
	f.Fuzz(func(t *testing.T, text string) {
		gitKeys, ok := gitConfigKeys(t, text)
		var keys []string
		bad := false
		for l := range GitConfigLines(text) {
			bad = bad || l.Bad
			if l.Key != "" && !l.Continued && !l.Bad {
				keys = append(keys, l.Key)
			}
		}
		switch {
		case ok && bad:
			t.Fatalf("git reads %q (keys %q); the reading refuses it", text, gitKeys)
		case ok && !slices.Equal(keys, gitKeys):
			t.Fatalf("git reads %q as keys %q; the reading finds %q", text, gitKeys, keys)
		case !ok && !bad:
			t.Fatalf("git refuses %q; the reading accepts it (keys %q)", text, keys)
		}
	})
}

// gitConfigKeys is the keys git reads in text, in order, and whether git
// accepts it.
func gitConfigKeys(t *testing.T, text string) ([]string, bool) {
	t.Helper()
	cmd := exec.Command("git", "config", "--file", "-", "--no-includes", "--list", "-z")
	cmd.Dir = "/" // in no repository
	cmd.Env = []string{"HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(stderr.String(), "bad config line") {
			return nil, false
		}
		t.Fatalf("git config --list of %q: %v: %s", text, err, stderr.Bytes())
	}
	var keys []string
	for _, entry := range bytes.Split(out, []byte{0}) {
		if len(entry) == 0 {
			continue
		}
		key, _, _ := bytes.Cut(entry, []byte{'\n'})
		keys = append(keys, string(key))
	}
	return keys, true
}

// TestGitConfigKeysOfGit: the differential's reading of git's output.
func TestGitConfigKeysOfGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	keys, ok := gitConfigKeys(t, "[a \"B\"]\n\tk = \"x\\ny\"\n\tb\n")
	if !ok || fmt.Sprint(keys) != "[a.B.k a.B.b]" {
		t.Errorf("keys %q, accepted %v", keys, ok)
	}
	if _, ok := gitConfigKeys(t, "[a"); ok {
		t.Errorf("git accepts [a")
	}
}
