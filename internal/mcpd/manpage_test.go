package mcpd

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/soda-project/soda/internal/doccheck"
)

// TestManPageFlags: soda-mcpd's options are the ones its --help names and
// the ones the OPTIONS of soda-mcpd(8) document, and the other way round.
func TestManPageFlags(t *testing.T) {
	man, err := os.ReadFile("../../man/soda-mcpd.8.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("soda-mcpd --help exited %d", code)
	}
	var f flags
	opts, hidden := doccheck.Flags(f.flagSet(io.Discard))
	section := doccheck.Section(string(man), "# OPTIONS")
	c := doccheck.Command{Name: "soda-mcpd", Options: opts, Hidden: hidden, Help: help.String(), Page: section}
	c.Check(t)
	doccheck.CheckDefined(t, section, c)
}
