package sodad

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/doccheck"
	"github.com/soda-project/soda/internal/version"
)

// TestMainCommandLine: what sodad does with a command line it does not
// run: help on stdout, the version, and usage errors (exit status 2) with
// a pointer to the help.
func TestMainCommandLine(t *testing.T) {
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string // prefixes; "" wants nothing
	}{
		{"help", []string{"--help"}, 0, "Usage: sodad [OPTIONS]\n", ""},
		{"h", []string{"-h"}, 0, "Usage: sodad [OPTIONS]\n", ""},
		{"version", []string{"--version"}, 0, "", "sodad " + version.Version + "\n"},
		{"unknown option", []string{"--bogus"}, 2, "", "sodad: flag provided but not defined: -bogus\nRun 'sodad --help' for usage.\n"},
		{"bad value", []string{"--max-sandboxes", "many"}, 2, "", "sodad: invalid value \"many\" for flag -max-sandboxes"},
		{"argument", []string{"extra"}, 2, "", "sodad: unexpected argument \"extra\"\nRun 'sodad --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(context.Background(), tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			for _, o := range []struct {
				name, got, want string
			}{{"stdout", stdout.String(), tt.stdout}, {"stderr", stderr.String(), tt.stderr}} {
				if o.want == "" && o.got != "" || !strings.HasPrefix(o.got, o.want) {
					t.Errorf("%s %q, want %q at its start", o.name, o.got, o.want)
				}
			}
		})
	}
}

// TestManPageFlags: sodad's options are the ones its --help names and the
// ones the OPTIONS of sodad(8) document, and the other way round.
func TestManPageFlags(t *testing.T) {
	man, err := os.ReadFile("../../man/sodad.8.md")
	if err != nil {
		t.Fatal(err)
	}
	var f cliFlags
	opts, hidden := doccheck.Flags(f.flagSet())
	section := doccheck.Section(string(man), "# OPTIONS")
	c := doccheck.Command{Name: "sodad", Options: opts, Hidden: hidden, Help: Usage, Page: section}
	c.Check(t)
	doccheck.CheckDefined(t, section, c)
}
