package sandboxinit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/protect"
)

// stripGitRunsCases are configuration files, what stripGitRuns leaves of
// them and the keys it removes: TestStripGitRuns's table and
// FuzzStripGitRuns's seeds.
func stripGitRunsCases() []struct {
	in, want string
	removed  []string
} {
	return []struct {
		in, want string
		removed  []string
	}{
		{"[core]\n\tbare = false\n\tfsmonitor = touch x\n", "[core]\n\tbare = false\n", []string{"core.fsmonitor"}},
		{"[core] hooksPath = /tmp\n[user]\n\tname = a\n", "[core]\n[user]\n\tname = a\n", []string{"core.hookspath"}},
		{"[alias]\n\tst = !sh \\\n\t  -c id\n[user]\n\tname = a\n", "[alias]\n[user]\n\tname = a\n", []string{"alias.st"}},
		// The continued value hides no section from the reading.
		{"[core]\n\tx = a \\\n[user]\n\thooksPath = /tmp\n", "[core]\n\tx = a \\\n[user]\n", []string{"core.hookspath"}},
		{"[user]\n\tname = a # not continued \\\n\temail = b\n", "[user]\n\tname = a # not continued \\\n\temail = b\n", nil},
		{"[filter \"lfs\"]\n\tclean = git-lfs clean\n", "[filter \"lfs\"]\n", []string{"filter.clean"}},
		// The quotes of a continued value go on to its next line, where
		// a '#' is no comment.
		{"[core]\n\tx = \"a \\\n# b\" \\\n[user]\n\thooksPath = /tmp\n", "[core]\n\tx = \"a \\\n# b\" \\\n[user]\n", []string{"core.hookspath"}},
		// What the line-by-line reading missed: a byte order mark, headers
		// one after another, a NUL byte in a subsection (git's key stops
		// there), "\r\n" line ends.
		{"\xef\xbb\xbf[user][core]hooksPath=/tmp\n[user]\n", "\xef\xbb\xbf[user][core]\n[user]\n", []string{"core.hookspath"}},
		{"[core \"hookspath\x00\"] x = /tmp\n[user]\n\tname = a\n", "[core \"hookspath\x00\"]\n[user]\n\tname = a\n", []string{"core.hookspath"}},
		{"[core]\r\n\thooksPath = /tmp \\\r\n\t/x\r\n[user]\r\n", "[core]\r\n[user]\r\n", []string{"core.hookspath"}},
		// A key git refuses (an open quote) goes, and what git would read
		// once it is gone runs nothing either.
		{"[core]\n\tpager = \"less\n\tsshCommand = x\n\tbare = true\n", "[core]\n\tbare = true\n", []string{"core.pager", "core.sshcommand"}},
	}
}

func TestStripGitRuns(t *testing.T) {
	for _, tt := range stripGitRunsCases() {
		got, removed := stripGitRuns(tt.in)
		if got != tt.want || fmt.Sprint(removed) != fmt.Sprint(tt.removed) {
			t.Errorf("stripGitRuns(%q) = %q, %v; want %q, %v", tt.in, got, removed, tt.want, tt.removed)
		}
		if protect.GitConfigRuns(got) {
			t.Errorf("stripGitRuns(%q) still runs: %q", tt.in, got)
		}
	}
}

// TestCheckConfig: the guard rewrites a configuration that makes git run
// a program without it, leaves one that does not, and keeps nothing of
// one longer than it reads (git would read the rest).
func TestCheckConfig(t *testing.T) {
	for _, tt := range []struct {
		name, in, want, event string
	}{
		{"runs", "[core]\n\tbare = false\n\thooksPath = /x\n", "[core]\n\tbare = false\n", "core.hookspath"},
		{"runs nothing", "[user]\n\tname = a\n", "[user]\n\tname = a\n", ""},
		{"past what is read", "#" + strings.Repeat(" ", 1<<20) + "\n[core]\n\thooksPath = /x\n", "[core]\n\trepositoryformatversion = 0\n", "everything (more than 1048576 bytes)"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config"), []byte(tt.in), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var events bytes.Buffer
		g := &guard{enc: json.NewEncoder(&events)}
		g.checkConfig(&watched{path: dir, kind: watchGit, fresh: true, git: fd}, "config")
		unix.Close(fd)
		got, err := os.ReadFile(filepath.Join(dir, "config"))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: config %.80q, %v; want %q", tt.name, got, err, tt.want)
		}
		if !strings.Contains(events.String(), tt.event) || tt.event == "" && events.Len() > 0 {
			t.Errorf("%s: events %q, want one naming %q", tt.name, events.String(), tt.event)
		}
	}
}

// FuzzStripGitRuns: what stripGitRuns leaves runs nothing (as
// protect.GitConfigRuns reads it, the host's check), every key it
// removes is one GitConfigRuns flags, in order, the text of one that runs
// nothing is left as it is, and a second pass changes nothing.
func FuzzStripGitRuns(f *testing.F) {
	for _, tt := range stripGitRunsCases() {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, text string) {
		clean, removed := stripGitRuns(text)
		if protect.GitConfigRuns(clean) {
			t.Fatalf("stripGitRuns(%q) = %q still runs", text, clean)
		}
		var flagged []string
		for l := range protect.GitConfigLines(text) {
			if l.Runs() && !l.Continued {
				flagged = append(flagged, l.ShortKey())
			}
		}
		if !slices.Equal(removed, flagged) {
			t.Fatalf("stripGitRuns(%q) removed %q; GitConfigRuns flags %q", text, removed, flagged)
		}
		if !protect.GitConfigRuns(text) && (clean != text || removed != nil) {
			t.Fatalf("stripGitRuns(%q) of a file that runs nothing = %q, %q", text, clean, removed)
		}
		if again, more := stripGitRuns(clean); again != clean || more != nil {
			t.Fatalf("stripGitRuns(%q) = %q, %q: not done in one pass", clean, again, more)
		}
		// Each line left is a line of text, or the headers of one, in order.
		in := strings.SplitAfter(text, "\n")
		j := 0
		for _, c := range strings.SplitAfter(clean, "\n") {
			if c == "" {
				continue
			}
			for j < len(in) && in[j] != c && !(strings.HasSuffix(c, "]\n") && strings.HasPrefix(in[j], c[:len(c)-1])) {
				j++
			}
			if j == len(in) {
				t.Fatalf("stripGitRuns(%q) = %q: line %q is not from the text", text, clean, c)
			}
			j++
		}
	})
}
