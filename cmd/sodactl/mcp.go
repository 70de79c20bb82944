package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/config"
	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/token"
)

// mcpToken implements "sodactl mcp token NAME".
func mcpToken(opts *options, args []string, stdout io.Writer) error {
	name, err := parseName(opts, args, "sodactl mcp token")
	if err != nil {
		return err
	}
	path := opts.tokenFile
	unconfigured := false
	if path == "" {
		t, err := resolve(opts, name, true)
		if err != nil {
			return err
		}
		cfg := t.cfg
		if cfg.Bridge.Auth == "none" {
			where := cfg.Path
			if t.record != nil {
				where = t.recordPath
			}
			return fmt.Errorf("soda-mcp@%s runs without authentication (Auth=none in %s), so it has no token; "+
				"clients need no Authorization header", name, where)
		}
		path = cfg.Bridge.TokenFile
		unconfigured = cfg.Path == "" && t.record == nil
	}
	tok, err := readToken(name, path)
	if errors.Is(err, fs.ErrNotExist) && unconfigured {
		return fmt.Errorf("%w; note that %s does not exist either: soda-mcp@%s is not configured",
			err, config.PathFor(opts.configDir, name), name)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// mcpClientConfig implements "sodactl mcp client-config NAME --client C".
func mcpClientConfig(opts *options, args []string, stdout, stderr io.Writer) error {
	const cmd = "sodactl mcp client-config"
	fset := newFlagSet(cmd)
	opts.bind(fset)
	client := fset.String("client", "", "client to configure")
	pos, err := parseInterspersed(fset, args, mcpUsage, cmd)
	if err != nil {
		return err
	}
	name, err := oneName(pos, cmd)
	if err != nil {
		return err
	}
	known := strings.Join(clientconfig.Clients(), ", ")
	switch {
	case *client == "":
		return usagef(cmd, "missing --client (one of %s)", known)
	case !isClient(*client):
		return usagef(cmd, "unknown client %q (known: %s)", *client, known)
	}
	t, err := resolve(opts, name, true)
	if err != nil {
		return err
	}
	cfg := t.cfg
	if cfg.Path == "" {
		fmt.Fprintf(stderr, "note: %s\n", t.origin(opts))
	}
	url, err := clientconfig.URL(cfg.Bridge.Listen)
	if err != nil {
		return fmt.Errorf("%s: Listen=: %w", cfg.Path, err)
	}
	var tok string
	if opts.tokenFile != "" || cfg.Bridge.Auth != "none" {
		path := opts.tokenFile
		if path == "" {
			path = cfg.Bridge.TokenFile
		}
		if tok, err = readToken(name, path); err != nil {
			return err
		}
	}
	sn, err := clientconfig.Render(*client, clientconfig.Server{Name: name, URL: url, Token: tok})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, sn.Text); err != nil {
		return err
	}
	hint := sn.Hint
	if tok == "" {
		hint += " (No token: soda-mcp@" + name + " runs with Auth=none.)"
	}
	fmt.Fprintln(stderr, hint)
	return nil
}

func isClient(c string) bool {
	for _, k := range clientconfig.Clients() {
		if c == k {
			return true
		}
	}
	return false
}

// loadConfig loads NAME.conf from dir. A missing file gives the defaults,
// as for a server started ad hoc ("soda-mcpd --name NAME -- COMMAND"), with
// an empty Path.
func loadConfig(dir, name string) (config.Server, error) {
	path := config.PathFor(dir, name)
	cfg, err := config.Load(path)
	switch {
	case err == nil:
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist):
		return config.Defaults(name), nil
	case errors.Is(err, fs.ErrPermission):
		return config.Server{}, fmt.Errorf("cannot read %s: permission denied; run sodactl as root (sudo) "+
			"or as a user allowed to read it", path)
	default:
		// config's errors name the file, line and key already.
		return config.Server{}, fmt.Errorf("invalid configuration: %w", err)
	}
}

// target is a server NAME resolved for a command: by its configuration
// file, else by the runtime record of a soda-mcpd running under that name
// (one started by hand, such as "make run"), else, for the commands that
// allow it, by the defaults.
type target struct {
	cfg        config.Server    // NAME.conf, or the defaults adjusted to the record
	record     *runstate.Record // the live record, when resolved by it
	recordPath string
}

// resolve finds server name: NAME.conf in opts.configDir when it exists;
// else a live runtime record in opts.runtimeDirs; else, with fallback, the
// defaults of an ad-hoc soda-mcpd (what "mcp token" and "client-config"
// have always assumed), or an error that says what was looked for.
func resolve(opts *options, name string, fallback bool) (target, error) {
	cfg, err := loadConfig(opts.configDir, name)
	if err != nil || cfg.Path != "" {
		return target{cfg: cfg}, err
	}
	rec, path, rerr := runstate.Lookup(name, opts.searchDirs())
	if rerr == nil {
		if len(rec.Listen) == 0 {
			return target{}, fmt.Errorf("soda-mcpd %s (pid %d, %s) serves no TCP address", name, rec.PID, path)
		}
		cfg.Bridge.Listen = rec.Listen[0]
		cfg.Bridge.TokenFile = rec.TokenFile
		if !rec.Auth {
			cfg.Bridge.Auth = "none"
		}
		return target{cfg: cfg, record: &rec, recordPath: path}, nil
	}
	if fallback {
		return target{cfg: cfg}, nil
	}
	return target{}, fmt.Errorf("no server %q: %s does not exist, and %v; configure it (see soda.conf(5)), "+
		"start it (soda-mcpd --name %s ... -- COMMAND), or point --config-dir at the directory that holds it",
		name, config.PathFor(opts.configDir, name), rerr, name)
}

// origin says, for a note on stderr, how t was found.
func (t target) origin(opts *options) string {
	if t.record != nil {
		return fmt.Sprintf("%s does not exist; using the running soda-mcpd %s (pid %d, %s)",
			config.PathFor(opts.configDir, t.cfg.Name), t.cfg.Name, t.record.PID, t.recordPath)
	}
	return fmt.Sprintf("%s does not exist and no soda-mcpd %s is running; assuming an ad-hoc soda-mcpd with the defaults (Listen=%s)",
		config.PathFor(opts.configDir, t.cfg.Name), t.cfg.Name, t.cfg.Bridge.Listen)
}

// readToken reads the token file of server name, turning the usual failures
// into advice.
func readToken(name, path string) (string, error) {
	tok, err := token.Read(path)
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no token yet for %s (%s: %w): start soda-mcp@%s once "+
			"(systemctl start soda-mcp@%s) or run soda-mcpd %s", name, path, fs.ErrNotExist, name, name, name)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("cannot read token %s: permission denied; run sodactl as root (sudo) "+
			"or as a member of the file's group", path)
	default:
		return "", err
	}
}
