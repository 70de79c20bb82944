package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/serverconf"
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
		t, err := opts.resolver().ResolveOrDefaults(name)
		if err != nil {
			return err
		}
		cfg := t.Config
		if cfg.Bridge.Auth == "none" {
			where := cfg.Path
			if t.Record != nil {
				where = t.RecordPath
			}
			return fmt.Errorf("soda-mcp@%s runs without authentication (Auth=none in %s), so it has no token; "+
				"clients need no Authorization header", name, where)
		}
		path = cfg.Bridge.TokenFile
		unconfigured = cfg.Path == "" && t.Record == nil
	}
	tok, err := mcpgrant.ReadToken(name, path)
	if errors.Is(err, fs.ErrNotExist) && unconfigured {
		return fmt.Errorf("%w; note that %s does not exist either: soda-mcp@%s is not configured%s",
			err, serverconf.PathFor(opts.configDir, name), name, validatorHint(name, "token"))
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// clientConfigFlags returns the flags of "sodactl mcp client-config": the
// shared ones, bound to opts, and --client.
func clientConfigFlags(opts *options, client *string) *flag.FlagSet {
	fs := sharedFlags(opts, "sodactl mcp client-config")
	fs.StringVar(client, "client", "", "client to configure")
	return fs
}

// mcpClientConfig implements "sodactl mcp client-config NAME --client C".
func mcpClientConfig(opts *options, args []string, stdout, stderr io.Writer) error {
	const cmd = "sodactl mcp client-config"
	client := new(string)
	fset := clientConfigFlags(opts, client)
	pos, err := parseInterspersed(fset, args, mcpUsage, cmd)
	if err != nil {
		return err
	}
	name, err := oneName(pos, cmd)
	if err != nil {
		return err
	}
	if err := checkClient(cmd, *client); err != nil {
		return err
	}
	t, err := opts.resolver().ResolveOrDefaults(name)
	if err != nil {
		return err
	}
	cfg := t.Config
	if cfg.Path == "" {
		hint := ""
		if t.Record == nil {
			hint = validatorHint(name, "client-config")
		}
		fmt.Fprintf(stderr, "note: %s%s\n", t.Origin(), hint)
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
		if tok, err = mcpgrant.ReadToken(name, path); err != nil {
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

// validatorHint points a name that looks like a validation worker's
// (validate-KIND, as its 401 names it) to "sodactl validate CMD KIND":
// the workers' tokens and addresses are not the bridges'.
func validatorHint(name, cmd string) string {
	kind, ok := strings.CutPrefix(name, "validate-")
	if !ok || serverconf.ValidName(kind) != nil {
		return ""
	}
	return fmt.Sprintf("; for the validation worker soda-validate@%s, run sodactl validate %s %s", kind, cmd, kind)
}

// checkClient says what is wrong with --client for cmd: missing, or not
// one of the clients clientconfig renders.
func checkClient(cmd, client string) error {
	known := clientconfig.Clients()
	switch {
	case client == "":
		return usagef(cmd, "missing --client (one of %s)", strings.Join(known, ", "))
	case !slices.Contains(known, client):
		return usagef(cmd, "unknown client %q (known: %s)", client, strings.Join(known, ", "))
	}
	return nil
}

// resolver finds servers in the directories opts names.
func (o *options) resolver() mcpgrant.Resolver {
	return mcpgrant.Resolver{ConfigDir: o.configDir, RuntimeDirs: o.searchDirs()}
}
