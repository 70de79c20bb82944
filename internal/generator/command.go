package generator

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/soda-project/soda/internal/version"
)

// Usage is soda-generator's help text.
const Usage = `Usage: soda-generator NORMAL-DIR [EARLY-DIR LATE-DIR]
       soda-generator --help | --version

A systemd generator (systemd.generator(7)): systemd runs it at boot and on
every daemon-reload with three output directories; for a test, run it with
one. For each /etc/soda/mcp/NAME.conf it writes into NORMAL-DIR the drop-in
soda-mcp@NAME.socket.d/50-listen.conf (ListenStream= from Listen=) and, with
StartOnBoot=yes, the link sockets.target.wants/soda-mcp@NAME.socket.
Problems with a configuration go to the kernel log and never fail the boot.
For the system's manager, and for users' (as a user generator, where it
writes nothing else), it writes soda-sandbox.slice.d/00-soda-cpu-quota.conf:
all sandboxes together get one CPU less than the host has (CPUQuota=),
unless a drop-in in /etc/systemd/system/soda-sandbox.slice.d
(/etc/systemd/user/... for users' managers) sets CPUQuota= itself.

Options:
  -h, --help  print this help and exit
  --version   print the version and exit

See soda-generator(8).
`

// Command is soda-generator's command line.
type Command struct {
	// ConfigDir holds NAME.conf files (/etc/soda/mcp).
	ConfigDir string
	// TemplateUnit is the path of soda-mcp@.socket.
	TemplateUnit string
	// ValidateDir holds the validation workers' KIND.conf ("": none).
	ValidateDir string
	// NumCPU is the host's CPU count, for soda-sandbox.slice's drop-in.
	NumCPU int
	// User says a user's manager runs the generator (UserManager): only
	// the slice's drop-in is written.
	User bool
	// EtcDir is the administrator's systemd directory (/etc/systemd):
	// a drop-in in its system (or user) /soda-sandbox.slice.d that sets
	// CPUQuota= wins over soda's ("": none is looked for).
	EtcDir string
	// Stdout and Stderr receive help and usage errors.
	Stdout, Stderr io.Writer
	// Log receives the problems found while generating.
	Log Logger
}

// Run runs the generator with args (without the program name) and returns
// the exit status: 0 once the directories are valid, whatever the
// configurations hold (a generator must not fail the boot because of
// them); 1 when the output cannot be written; 2 when the command line is
// wrong (not 1 or 3 absolute directories), after a usage message.
func (c Command) Run(args []string) int {
	if len(args) == 1 {
		switch args[0] {
		case "-h", "--help", "-help":
			fmt.Fprint(c.Stdout, Usage)
			return 0
		case "--version", "-version":
			fmt.Fprintln(c.Stdout, "soda-generator", version.Version)
			return 0
		}
	}
	if err := checkDirs(args); err != nil {
		fmt.Fprintf(c.Stderr, "soda-generator: %v\nRun 'soda-generator --help' for usage.\n", err)
		return 2
	}
	admin := ""
	if c.EtcDir != "" {
		manager := "system"
		if c.User {
			manager = "user"
		}
		admin = filepath.Join(c.EtcDir, manager, "soda-sandbox.slice.d")
	}
	opts := Options{ConfigDir: c.ConfigDir, OutputDir: args[0], TemplateUnit: c.TemplateUnit, ValidateDir: c.ValidateDir,
		NumCPU: c.NumCPU, User: c.User, SliceAdminDir: admin}
	if _, err := Generate(opts, c.Log); err != nil {
		c.Log("%v", err)
		return 1
	}
	return 0
}

// checkDirs accepts what systemd passes: one (for tests) or three
// absolute directory paths, none of them an option.
func checkDirs(args []string) error {
	if len(args) != 1 && len(args) != 3 {
		return fmt.Errorf("want 1 or 3 output directories (NORMAL-DIR [EARLY-DIR LATE-DIR]), got %d arguments", len(args))
	}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("unknown option %q", a)
		case !filepath.IsAbs(a):
			return fmt.Errorf("output directory %q is not an absolute path", a)
		}
	}
	return nil
}

// UserManager says whether a user's service manager runs the generator:
// from systemd's $SYSTEMD_SCOPE (systemScope, "system" or "user", set for
// generators since systemd 251) or, without it, from the directory of the
// path it was run as (argv0): user-generators.
func UserManager(systemScope, argv0 string) bool {
	switch systemScope {
	case "user":
		return true
	case "system":
		return false
	}
	return filepath.Base(filepath.Dir(argv0)) == "user-generators"
}
