package sandboxinit

import (
	"fmt"
	"testing"

	"github.com/soda-project/soda/internal/sandbox/protect"
)

func TestStripGitRuns(t *testing.T) {
	for _, tt := range []struct {
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
	} {
		got, removed := stripGitRuns(tt.in)
		if got != tt.want || fmt.Sprint(removed) != fmt.Sprint(tt.removed) {
			t.Errorf("stripGitRuns(%q) = %q, %v; want %q, %v", tt.in, got, removed, tt.want, tt.removed)
		}
		if protect.GitConfigRuns(got) {
			t.Errorf("stripGitRuns(%q) still runs: %q", tt.in, got)
		}
	}
}
