package doccheck

import (
	"flag"
	"slices"
	"testing"
)

func TestHelpOptions(t *testing.T) {
	tests := []struct {
		name, help string
		want       []string
	}{
		{"long", "Options:\n  --config-dir DIR    where\n  --version\n", []string{"config-dir", "version"}},
		{"two spellings", "  -v, --verbose      log\n  -C, --workdir DIR\n", []string{"v", "verbose", "C", "workdir"}},
		{"PrintDefaults", "  -call-timeout SPAN\n    \tfail calls\n  -no-auth\n", []string{"call-timeout", "no-auth"}},
		{"continuation lines are no options", "  --direct   build it (needed for\n                   --unprotect, --audit-json)\n", []string{"direct"}},
		{"commands are no options", "Commands:\n  run [OPTIONS] -- COMMAND\n  list   the sandboxes\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HelpOptions(tt.help); !slices.Equal(got, tt.want) {
				t.Errorf("HelpOptions = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDefined(t *testing.T) {
	tests := []struct {
		name, section string
		want          []string
	}{
		{"terms", "**--profiles** *DIR*\n: The profiles.\n\n**-v**, **--verbose**\n: Debug.\n", []string{"profiles", "v", "verbose"}},
		{"several on a term", "**--memory** *SIZE*, **--tasks** *N*\n: Limits.\n", []string{"memory", "tasks"}},
		{"value in bold", "**--transport stdio**|**http**\n: Which.\n", []string{"transport"}},
		{"terms on two lines", "**--a** *X*\n**--b** *Y*\n: Both.\n", []string{"a", "b"}},
		{"prose is no term", "Give **--direct** or\n**--profile**, not both.\n", nil},
		{"a command is no option", "**sandbox list** [**--json**]\n: The sandboxes.\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Defined(tt.section); !slices.Equal(got, tt.want) {
				t.Errorf("Defined = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSection(t *testing.T) {
	page := "# NAME\n\nx\n\n# OPTIONS\n\n**--a**\n: A.\n\n## DETAILS\n\nmore\n\n*MORE OPTIONS* (these)\n\n**--b**\n: B.\n\n# FILES\n\nf\n"
	tests := []struct {
		heading, want string
	}{
		{"# OPTIONS", "# OPTIONS\n\n**--a**\n: A.\n\n## DETAILS\n\nmore\n\n*MORE OPTIONS* (these)\n\n**--b**\n: B.\n"},
		{"*MORE OPTIONS*", "*MORE OPTIONS* (these)\n\n**--b**\n: B.\n"},
		{"# FILES", "# FILES\n\nf\n"},
		{"# EXIT STATUS", ""},
	}
	for _, tt := range tests {
		t.Run(tt.heading, func(t *testing.T) {
			if got := Section(page, tt.heading); got != tt.want {
				t.Errorf("Section(%q) = %q, want %q", tt.heading, got, tt.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("memory", "", "")
	fs.String("memory-max", "", Deprecated+": use --memory")
	fs.Bool("v", false, "")
	options, hidden := Flags(fs)
	if want := []string{"memory", "v"}; !slices.Equal(options, want) {
		t.Errorf("options %q, want %q", options, want)
	}
	if want := []string{"memory-max"}; !slices.Equal(hidden, want) {
		t.Errorf("hidden %q, want %q", hidden, want)
	}
}

// recorder is a testing.TB that keeps the errors it is given.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, format)
}

func (r *recorder) Error(args ...any) { r.errs = append(r.errs, "error") }

func TestCheck(t *testing.T) {
	page := "**--memory** *SIZE*\n: Memory.\n\n**--memory-max** *SIZE*\n: Deprecated name of **--memory**.\n\n**-v**, **--verbose**\n: Log.\n"
	tests := []struct {
		name  string
		cmd   Command
		nerrs int
	}{
		{"agree", Command{Name: "c", Options: []string{"memory", "v", "verbose"}, Hidden: []string{"memory-max"},
			Help: "  --memory SIZE\n  -v, --verbose\n  -h, --help\n", Page: page}, 0},
		{"help lacks one", Command{Name: "c", Options: []string{"memory", "v", "verbose"},
			Help: "  --memory SIZE\n  --verbose\n", Page: page}, 1},
		{"help names a hidden one", Command{Name: "c", Options: []string{"memory", "v", "verbose"}, Hidden: []string{"memory-max"},
			Help: "  --memory SIZE\n  --memory-max SIZE\n  -v, --verbose\n", Page: page}, 1},
		{"help names an unknown one", Command{Name: "c", Options: []string{"memory", "v", "verbose"},
			Help: "  --memory SIZE\n  --tasks N\n  -v, --verbose\n", Page: page}, 1},
		{"page lacks one", Command{Name: "c", Options: []string{"memory", "v", "verbose", "tasks"},
			Help: "  --memory SIZE\n  --tasks N\n  -v, --verbose\n", Page: page}, 1},
		{"no page", Command{Name: "c", Help: "", Page: ""}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			tt.cmd.Check(r)
			if len(r.errs) != tt.nerrs {
				t.Errorf("%d errors %q, want %d", len(r.errs), r.errs, tt.nerrs)
			}
		})
	}
}

func TestCheckDefined(t *testing.T) {
	page := "**--memory** *SIZE*\n: Memory.\n\n**--memory-max** *SIZE*\n: Deprecated.\n\n**--client** *C*\n: Client.\n"
	a := Command{Name: "a", Options: []string{"memory"}, Hidden: []string{"memory-max"}}
	b := Command{Name: "b", Options: []string{"client"}}
	tests := []struct {
		name  string
		cmds  []Command
		nerrs int
	}{
		{"all accepted", []Command{a, b}, 0},
		{"one stale", []Command{a}, 1},
		{"hidden ones count", []Command{{Name: "a", Options: []string{"memory"}}, b}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckDefined(r, page, tt.cmds...)
			if len(r.errs) != tt.nerrs {
				t.Errorf("%d errors %q, want %d", len(r.errs), r.errs, tt.nerrs)
			}
		})
	}
}
