//go:build !soda_lean

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/token"
	"github.com/soda-project/soda/internal/validate"
)

const validateUsage = `Usage: sodactl validate token [OPTIONS] KIND
       sodactl validate client-config [OPTIONS] KIND --client CLIENT

The validation workers, soda-validate@KIND (soda-validated(8)).

Commands:
  token KIND
        Print the bearer token of soda-validate@KIND on stdout: the token
        file of the running worker, else STATE/KIND/token
        (/var/lib/soda/validate/KIND/token, root's). soda-validated makes
        it the first time it serves HTTP.
  client-config KIND --client CLIENT
        Print what to run or paste to make CLIENT use soda-validate@KIND,
        as the server validate-KIND: the address the running worker
        serves (from STATE/KIND/owner.json), else [Listener] Listen= of
        /etc/soda/validate/KIND.conf, with its token. The snippet goes to
        stdout; a one-line hint saying where it goes is printed on stderr.

Options:
  --client CLIENT     claude, codex, opencode or vscode (client-config only)
  --config-dir DIR    directory holding KIND.conf (default /etc/soda/validate)
  --state-dir DIR     the workers' state (default /var/lib/soda/validate)
  --token-file FILE   read the token from FILE instead
  -h, --help          show this help

Options may come before or after KIND.
`

// validateOptions are the flags of the validate commands: the workers
// have directories of their own, apart from the bridges'.
type validateOptions struct {
	configDir, stateDir, tokenFile string
}

// validateCommand implements "sodactl validate COMMAND".
func validateCommand(opts *options, args []string, stdout, stderr io.Writer) error {
	vo := &validateOptions{configDir: validate.DefaultDir, stateDir: validate.DefaultStateDir, tokenFile: opts.tokenFile}
	fset := newFlagSet("sodactl validate")
	vo.bind(fset)
	if err := parse(fset, args, validateUsage, "sodactl validate"); err != nil {
		return err
	}
	rest := fset.Args()
	if len(rest) == 0 {
		return usagef("sodactl validate", "missing command (token or client-config)")
	}
	switch rest[0] {
	case "token":
		return validateToken(vo, rest[1:], stdout)
	case "client-config":
		return validateClientConfig(vo, rest[1:], stdout, stderr)
	case "help":
		return &helpRequest{validateUsage}
	default:
		return usagef("sodactl validate", "unknown command %q (known: token, client-config)", rest[0])
	}
}

// bind registers the flags on fs, defaulting to the current values so
// that flags given before a command keep their effect after it.
func (vo *validateOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&vo.configDir, "config-dir", vo.configDir, "directory holding KIND.conf")
	fs.StringVar(&vo.stateDir, "state-dir", vo.stateDir, "the workers' state directory")
	fs.StringVar(&vo.tokenFile, "token-file", vo.tokenFile, "token file to read")
}

// oneKind checks that pos holds exactly one valid kind.
func oneKind(pos []string, cmd string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef(cmd, "missing validator KIND")
	case 1:
	default:
		return "", usagef(cmd, "too many arguments: %s", strings.Join(pos[1:], " "))
	}
	if err := serverconf.ValidName(pos[0]); err != nil {
		return "", usagef(cmd, "%v", err)
	}
	return pos[0], nil
}

// validateToken implements "sodactl validate token KIND".
func validateToken(vo *validateOptions, args []string, stdout io.Writer) error {
	const cmd = "sodactl validate token"
	fset := newFlagSet(cmd)
	vo.bind(fset)
	pos, err := parseInterspersed(fset, args, validateUsage, cmd)
	if err != nil {
		return err
	}
	kind, err := oneKind(pos, cmd)
	if err != nil {
		return err
	}
	path := vo.tokenFile
	if path == "" {
		ep, err := validate.Locate(vo.configDir, vo.stateDir, kind)
		if err != nil {
			return err
		}
		path = ep.TokenFile
	}
	tok, err := readValidatorToken(kind, path)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// validateClientConfig implements "sodactl validate client-config KIND
// --client C".
func validateClientConfig(vo *validateOptions, args []string, stdout, stderr io.Writer) error {
	const cmd = "sodactl validate client-config"
	fset := newFlagSet(cmd)
	vo.bind(fset)
	client := fset.String("client", "", "client to configure")
	pos, err := parseInterspersed(fset, args, validateUsage, cmd)
	if err != nil {
		return err
	}
	kind, err := oneKind(pos, cmd)
	if err != nil {
		return err
	}
	if err := checkClient(cmd, *client); err != nil {
		return err
	}
	ep, err := validate.Locate(vo.configDir, vo.stateDir, kind)
	if err != nil {
		return err
	}
	if ep.Listen == "" {
		what := "has no [Listener] Listen="
		if !ep.Configured {
			what = "does not exist"
		}
		return fmt.Errorf("soda-validate@%s has no HTTP address: no soda-validated %s serves HTTP (%s), and %s %s; "+
			"set [Listener] Listen= there and start soda-validate@%s.socket, or run soda-validated --transport http --listen 127.0.0.1:PORT %s, "+
			"or point --config-dir and --state-dir at where they are",
			kind, kind, validate.OwnerRecordPath(vo.stateDir, kind), ep.Config, what, kind, kind)
	}
	url, err := clientconfig.URL(ep.Listen)
	if err != nil {
		return fmt.Errorf("%s: %w", ep.From(), err)
	}
	path := vo.tokenFile
	if path == "" {
		path = ep.TokenFile
	}
	tok, err := readValidatorToken(kind, path)
	if err != nil {
		return err
	}
	sn, err := clientconfig.Render(*client, clientconfig.Server{Name: "validate-" + kind, URL: url, Token: tok})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, sn.Text); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s (Address from %s.)\n", sn.Hint, ep.From())
	return nil
}

// readValidatorToken reads the token file of kind's worker, turning the
// usual failures into advice (each names the worker).
func readValidatorToken(kind, path string) (string, error) {
	tok, err := token.Read(path)
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no token yet for soda-validate@%s (%s: %w): soda-validated makes it the first time it serves HTTP: "+
			"systemctl start soda-validate@%s.socket and connect once (curl http://ADDRESS/ready), "+
			"or run soda-validated --transport http --listen 127.0.0.1:PORT %s", kind, path, fs.ErrNotExist, kind, kind)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("cannot read token %s: permission denied; run sodactl as root (sudo): "+
			"the validation workers' tokens are root's", path)
	default:
		return "", err
	}
}
