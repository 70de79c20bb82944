package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command could not do its job
	exitUsage = 2 // the command line is wrong
)

const rootUsage = `Usage: sodactl [OPTIONS] COMMAND ...

Operate soda: tokens and client configuration of the MCP bridges
(soda-mcp@NAME).

Commands:
  run [OPTIONS] -- COMMAND [ARGS...]
        Run COMMAND (an agent) in a sandbox with the MCP servers and
        network targets granted to it ('sodactl run --help').
  sandbox list|status ID|kill ID|grant ID TARGET|revoke ID TARGET|audit ID|profiles
        Operate the sandboxes of sodad, soda's supervisor
        ('sodactl sandbox --help').
  top [--once] [--interval DURATION]
        A live view of every soda daemon's metrics: sessions, calls/s,
        p99, refusals; sandboxes and their egress ('sodactl top --help').
  image pull|import|list|inspect|rm|prune
        The store of OCI images sandboxes run on: pull from a registry,
        import an OCI layout or a 'docker save' archive, list, inspect,
        remove ('sodactl image --help').
  mcp list
        List the configured and the running MCP servers with their
        units' state.
  mcp status NAME
        Show one server: config, URL, units, STATUS=, sessions, children.
  mcp token NAME
        Print the bearer token that clients of soda-mcp@NAME must send.
  mcp client-config NAME --client CLIENT
        Print the snippet that adds soda-mcp@NAME to CLIENT
        (claude, codex, opencode or vscode).
  validate token KIND
        Print the bearer token of the validation worker
        soda-validate@KIND ('sodactl validate --help').
  validate client-config KIND --client CLIENT
        Print the snippet that adds soda-validate@KIND to CLIENT.

Options:
  --config-dir DIR    directory holding NAME.conf (default /etc/soda/mcp)
  --runtime-dir DIR   directory holding the runtime records NAME.status.json
                      of running servers (default /run/soda/mcp, and
                      $XDG_RUNTIME_DIR/soda/mcp for a user)
  --token-file FILE   read the token from FILE instead of the configured one
  --version           print sodactl's version and exit
  -h, --help          show this help

Run 'sodactl mcp --help' for details; see also sodactl(1).
`

const mcpUsage = `Usage: sodactl mcp list [OPTIONS]
       sodactl mcp status [OPTIONS] NAME
       sodactl mcp token [OPTIONS] NAME
       sodactl mcp client-config [OPTIONS] NAME --client CLIENT

Commands:
  list
        Each NAME.conf, and each server running without one, with its
        Listen= address, the state of
        soda-mcp@NAME.socket and .service, and the live sessions and
        children (from /run/soda/mcp/NAME.status.json).
  status NAME
        The same for one server, plus the service's STATUS= line.
  token NAME
        Print the bearer token of soda-mcp@NAME on stdout. It is read from
        the file named by TokenFile= in NAME.conf, by default
        /var/lib/soda/mcp/NAME.token. sodactl never creates it: soda-mcpd
        does on its first start.
  client-config NAME --client CLIENT
        Print what to run or paste to make CLIENT use soda-mcp@NAME, with
        its URL (http://LISTEN/mcp, from Listen= in NAME.conf) and token.
        The snippet goes to stdout, so it can be piped or redirected; a
        one-line hint saying where it goes is printed on stderr.

Options:
  --client CLIENT     claude, codex, opencode or vscode (client-config only)
  --config-dir DIR    directory holding NAME.conf (default /etc/soda/mcp)
  --runtime-dir DIR   directory holding the runtime records NAME.status.json
                      of running servers (default /run/soda/mcp, and
                      $XDG_RUNTIME_DIR/soda/mcp for a user)
  --token-file FILE   read the token from FILE instead of the configured one
  -h, --help          show this help

Options may come before or after NAME.

NAME is found by NAME.conf, else by the runtime record of a soda-mcpd
running under that name (one started by hand, as "make run" does).
`

// options holds the flags shared by every command.
type options struct {
	configDir   string
	tokenFile   string
	runtimeDirs []string // where live NAME.status.json records are; nil: runstate.SearchDirs
}

// bind registers the shared flags on fs, defaulting to the current values so
// that flags given before a command keep their effect after it.
func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.configDir, "config-dir", o.configDir, "directory holding NAME.conf")
	fs.StringVar(&o.tokenFile, "token-file", o.tokenFile, "token file to read")
	fs.Func("runtime-dir", "directory holding NAME.status.json", func(v string) error {
		o.runtimeDirs = []string{v}
		return nil
	})
}

// searchDirs returns the directories of live runtime records.
func (o *options) searchDirs() []string {
	if o.runtimeDirs != nil {
		return o.runtimeDirs
	}
	return runstate.SearchDirs()
}

// usageError is a wrong command line: exit code 2 and a pointer to the help.
type usageError struct {
	msg  string
	help string // the command whose --help to suggest
}

func (e *usageError) Error() string { return e.msg }

func usagef(help, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), help: help}
}

// helpRequest asks run to print text (a usage) on stdout and exit 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// run executes the sodactl command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	if h := asHandOff(err); h != nil {
		return execFull(h, args, stderr)
	}
	var ran *ranCommand
	if errors.As(err, &ran) {
		// sodactl run chose its exit code (COMMAND's, or 125 for its own
		// failures, usage errors included); help is still 0.
		if ran.err == nil {
			return ran.code
		}
		var help *helpRequest
		if errors.As(ran.err, &help) {
			return run0(ran.err, stdout, stderr)
		}
		report(ran.err, stderr)
		return ran.code
	}
	return run0(err, stdout, stderr)
}

// report prints err on stderr, with a pointer to the help for a usage
// error.
func report(err error, stderr io.Writer) {
	var usage *usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "sodactl: %s\nRun '%s --help' for usage.\n", usage.msg, usage.help)
		return
	}
	fmt.Fprintf(stderr, "sodactl: %v\n", err)
}

// ranCommand carries the exit code of a command that ran something
// (sodactl run) and the error, if any, to print.
type ranCommand struct {
	code int
	err  error
}

func (r *ranCommand) Error() string { return fmt.Sprintf("exit status %d", r.code) }

func run0(err error, stdout, stderr io.Writer) int {
	var (
		help  *helpRequest
		usage *usageError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return exitOK
	case errors.As(err, &usage):
		report(err, stderr)
		return exitUsage
	default:
		report(err, stderr)
		return exitError
	}
}

// rootFlags returns the flags of sodactl itself, before a command: the
// shared ones, bound to opts, and --version.
func rootFlags(opts *options, showVersion *bool) *flag.FlagSet {
	fs := sharedFlags(opts, "sodactl")
	fs.BoolVar(showVersion, "version", false, "print the version")
	return fs
}

// sharedFlags returns a FlagSet for cmd with the options every command
// shares, bound to opts: all that "sodactl mcp list", "status" and
// "token" take.
func sharedFlags(opts *options, cmd string) *flag.FlagSet {
	fs := newFlagSet(cmd)
	opts.bind(fs)
	return fs
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	opts := &options{configDir: serverconf.DefaultDir}
	showVersion := new(bool)
	fs := rootFlags(opts, showVersion)
	if err := parse(fs, args, rootUsage, "sodactl"); err != nil {
		return err
	}
	if *showVersion {
		_, err := fmt.Fprintln(stdout, "sodactl", version.Version)
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("sodactl", "missing command")
	}
	switch rest[0] {
	case "image":
		return imageCommand(rest[1:], stdout, stderr)
	case "mcp":
		return mcpCommand(opts, rest[1:], stdout, stderr)
	case "run":
		code, err := runCommand(opts, rest[1:], stdout, stderr)
		return &ranCommand{code: code, err: err}
	case "sandbox":
		return sandboxCommand(rest[1:], stdout, stderr)
	case "top":
		return topCommand(opts, rest[1:], stdout)
	case "validate":
		return validateCommand(opts, rest[1:], stdout, stderr)
	case "help":
		return &helpRequest{rootUsage}
	default:
		return usagef("sodactl", "unknown command %q (known: image, mcp, run, sandbox, top, validate)", rest[0])
	}
}

func mcpCommand(opts *options, args []string, stdout, stderr io.Writer) error {
	fs := sharedFlags(opts, "sodactl mcp")
	if err := parse(fs, args, mcpUsage, "sodactl mcp"); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("sodactl mcp", "missing command (token, client-config, list or status)")
	}
	switch rest[0] {
	case "token":
		return mcpToken(opts, rest[1:], stdout)
	case "client-config":
		return mcpClientConfig(opts, rest[1:], stdout, stderr)
	case "list":
		return mcpList(opts, rest[1:], stdout)
	case "status":
		return mcpStatus(opts, rest[1:], stdout)
	case "help":
		return &helpRequest{mcpUsage}
	default:
		return usagef("sodactl mcp", "unknown command %q (known: token, client-config, list, status)", rest[0])
	}
}

// newFlagSet returns a FlagSet that reports errors to its caller instead of
// printing them or exiting.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses flags up to the first argument that is not one, turning
// -h/--help into a help request for usage and other errors into usage errors.
func parse(fs *flag.FlagSet, args []string, usage, cmd string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpRequest{usage}
	}
	if err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments, which it returns. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string, usage, cmd string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args, usage, cmd); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneName checks that pos holds exactly one valid server name.
func oneName(pos []string, cmd string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef(cmd, "missing server NAME")
	case 1:
	default:
		return "", usagef(cmd, "too many arguments: %s", strings.Join(pos[1:], " "))
	}
	if err := serverconf.ValidName(pos[0]); err != nil {
		return "", usagef(cmd, "%v", err)
	}
	return pos[0], nil
}

// parseName parses the shared options and the one NAME argument of cmd.
func parseName(opts *options, args []string, cmd string) (string, error) {
	fset := sharedFlags(opts, cmd)
	pos, err := parseInterspersed(fset, args, mcpUsage, cmd)
	if err != nil {
		return "", err
	}
	return oneName(pos, cmd)
}
