package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/config"
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
		cfg, err := loadConfig(opts.configDir, name, false)
		if err != nil {
			return err
		}
		if cfg.Bridge.Auth == "none" {
			return fmt.Errorf("soda-mcp@%s runs without authentication (Auth=none in %s), so it has no token; "+
				"clients need no Authorization header", name, cfg.Path)
		}
		path = cfg.Bridge.TokenFile
		unconfigured = cfg.Path == ""
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
	cfg, err := loadConfig(opts.configDir, name, false)
	if err != nil {
		return err
	}
	if cfg.Path == "" {
		fmt.Fprintf(stderr, "note: %s does not exist; assuming an ad-hoc soda-mcpd with the defaults (Listen=%s)\n",
			config.PathFor(opts.configDir, name), cfg.Bridge.Listen)
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

// loadConfig loads NAME.conf from dir. A missing file is an error when
// required; otherwise the defaults are used, as for a server started ad hoc
// ("soda-mcpd --name NAME -- COMMAND").
func loadConfig(dir, name string, required bool) (config.Server, error) {
	path := config.PathFor(dir, name)
	cfg, err := config.Load(path)
	switch {
	case err == nil:
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist) && !required:
		cfg = config.Defaults(name)
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist):
		return config.Server{}, fmt.Errorf("no configuration for %q: %s does not exist; create it (see soda.conf(5)) "+
			"or point --config-dir at the directory that holds it", name, path)
	case errors.Is(err, fs.ErrPermission):
		return config.Server{}, fmt.Errorf("cannot read %s: permission denied; run sodactl as root (sudo) "+
			"or as a user allowed to read it", path)
	default:
		// config's errors name the file, line and key already.
		return config.Server{}, fmt.Errorf("invalid configuration: %w", err)
	}
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
