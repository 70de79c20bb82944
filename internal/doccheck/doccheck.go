// Package doccheck keeps soda's documentation true to its code. For the
// commands' tests it compares a command's options with what its --help
// prints and with its man page (man/*.md), both ways; its own tests check
// that docs/architecture.md names every package and binary of the module.
// It is imported by tests only.
package doccheck

import (
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Deprecated starts the usage string of a flag that is a deprecated
// alias: it is accepted but hidden, named by neither --help nor Check's
// man page section (which may still mention it).
const Deprecated = "deprecated"

// Command is one command (or subcommand) line to check.
type Command struct {
	// Name is the command as typed ("sodactl run"), for the messages.
	Name string
	// Options are the options it accepts, without dashes ("memory",
	// "v"); -h and --help are implied.
	Options []string
	// Hidden are options it accepts that its help must not name:
	// deprecated aliases.
	Hidden []string
	// Help is what --help prints.
	Help string
	// Page is the part of the man page that documents the options
	// (Section).
	Page string
}

// Flags returns the options fs accepts, without dashes: the documented
// ones and the hidden ones (a usage starting with Deprecated).
func Flags(fs *flag.FlagSet) (options, hidden []string) {
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, Deprecated) {
			hidden = append(hidden, f.Name)
		} else {
			options = append(options, f.Name)
		}
	})
	return options, hidden
}

// helpOption matches an option line of a help text: indented by two
// spaces, as both "  --name ARG  what" and flag.PrintDefaults's
// "  -name ARG" are, with an optional second spelling ("-v, --verbose").
// Deeper indented lines continue a description.
var helpOption = regexp.MustCompile(`(?m)^  (-{1,2}[A-Za-z][A-Za-z0-9-]*)(?:, (-{1,2}[A-Za-z][A-Za-z0-9-]*))?`)

// HelpOptions returns the options that help's option lines name, without
// dashes.
func HelpOptions(help string) []string {
	var out []string
	for _, m := range helpOption.FindAllStringSubmatch(help, -1) {
		for _, o := range m[1:] {
			if o != "" {
				out = append(out, strings.TrimLeft(o, "-"))
			}
		}
	}
	return out
}

// manOption matches an option in bold, as the man pages write it.
var manOption = regexp.MustCompile(`\*\*(-{1,2}[A-Za-z][A-Za-z0-9-]*)`)

// Defined returns the options that section defines: those in bold on the
// term lines of its definition lists (a line starting with "**-" and
// followed, possibly after more term lines, by one starting with ": "),
// without dashes.
func Defined(section string) []string {
	var out []string
	lines := strings.Split(section, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "**-") {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.HasPrefix(lines[j], "**") {
			j++
		}
		if j == len(lines) || !strings.HasPrefix(lines[j], ": ") {
			continue
		}
		for _, m := range manOption.FindAllStringSubmatch(l, -1) {
			out = append(out, strings.TrimLeft(m[1], "-"))
		}
	}
	return out
}

// Section returns the text of page from the line that starts with
// heading (such as "# OPTIONS" or "*SESSION OPTIONS*") to the next
// top-level heading ("# ..."), or "" when no line starts with heading.
func Section(page, heading string) string {
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, heading) {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "# ") {
				end = j
				break
			}
		}
		return strings.Join(lines[i:end], "\n")
	}
	return ""
}

// spelled is how the man pages write option o: -C, --workdir.
func spelled(o string) string {
	if len(o) == 1 {
		return "-" + o
	}
	return "--" + o
}

// implied are the options the flag package accepts without their being
// defined: help.
var implied = []string{"h", "help"}

// Check reports, on t, every way in which c's options, its help and its
// man page section disagree: an option the help or the section leaves
// out, an option line of the help that names no option of c, and a
// hidden option that the help names. CheckDefined checks the other way
// round, from the page.
func (c Command) Check(t testing.TB) {
	t.Helper()
	if c.Page == "" {
		t.Errorf("%s: no man page section to check", c.Name)
	}
	help := HelpOptions(c.Help)
	var inBold []string
	for _, m := range manOption.FindAllStringSubmatch(c.Page, -1) {
		inBold = append(inBold, m[1])
	}
	for _, o := range c.Options {
		if !slices.Contains(help, o) {
			t.Errorf("%s --help does not name %s", c.Name, spelled(o))
		}
		if !slices.Contains(inBold, spelled(o)) {
			t.Errorf("%s: its man page does not document **%s**", c.Name, spelled(o))
		}
	}
	for _, o := range help {
		switch {
		case slices.Contains(c.Hidden, o):
			t.Errorf("%s --help names the hidden option %s", c.Name, spelled(o))
		case !slices.Contains(c.Options, o) && !slices.Contains(implied, o):
			t.Errorf("%s --help names %s, which it does not accept", c.Name, spelled(o))
		}
	}
}

// CheckDefined reports, on t, every option that section of a man page
// defines (Defined) but none of cmds accepts: a stale or misspelt entry.
func CheckDefined(t testing.TB, section string, cmds ...Command) {
	t.Helper()
	if section == "" {
		t.Error("no man page section to check")
	}
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	for _, o := range Defined(section) {
		accepted := slices.Contains(implied, o)
		for _, c := range cmds {
			accepted = accepted || slices.Contains(c.Options, o) || slices.Contains(c.Hidden, o)
		}
		if !accepted {
			t.Errorf("the man page documents **%s**, which %s does not accept", spelled(o), strings.Join(names, " or "))
		}
	}
}
