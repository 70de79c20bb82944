package validated

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/soda-project/soda/internal/doccheck"
)

// TestManPageFlags: soda-validated's options are the ones its --help names
// and the ones the OPTIONS of soda-validated(8) document, and the other
// way round.
func TestManPageFlags(t *testing.T) {
	man, err := os.ReadFile("../../man/soda-validated.8.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	Main([]string{"--help"}, nil, io.Discard, &help)
	if !bytes.HasPrefix(help.Bytes(), []byte("Usage: soda-validated")) {
		t.Fatalf("soda-validated --help printed %q", help.String())
	}
	var f flags
	opts, hidden := doccheck.Flags(f.flagSet(io.Discard))
	section := doccheck.Section(string(man), "# OPTIONS")
	c := doccheck.Command{Name: "soda-validated", Options: opts, Hidden: hidden, Help: help.String(), Page: section}
	c.Check(t)
	doccheck.CheckDefined(t, section, c)
}
