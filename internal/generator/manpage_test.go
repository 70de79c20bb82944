package generator

import (
	"io"
	"os"
	"testing"

	"github.com/soda-project/soda/internal/doccheck"
)

// TestManPageFlags: soda-generator's options (it has no FlagSet: Run
// takes them, alone, before the directories) are the ones its --help
// names and the ones the OPTIONS of soda-generator(8) document, and the
// other way round.
func TestManPageFlags(t *testing.T) {
	man, err := os.ReadFile("../../man/soda-generator.8.md")
	if err != nil {
		t.Fatal(err)
	}
	options := []string{"version"} // and -h, --help
	for _, o := range append([]string{"h", "help"}, options...) {
		arg := "--" + o
		if len(o) == 1 {
			arg = "-" + o
		}
		if code := (Command{Stdout: io.Discard, Stderr: io.Discard}).Run([]string{arg}); code != 0 {
			t.Errorf("soda-generator %s exited %d", arg, code)
		}
	}
	section := doccheck.Section(string(man), "# OPTIONS")
	c := doccheck.Command{Name: "soda-generator", Options: options, Help: Usage, Page: section}
	c.Check(t)
	doccheck.CheckDefined(t, section, c)
}
