// Package mcpgrant resolves the MCP servers granted to a sandbox
// (soda-mcp@NAME) to what the sandbox needs of each: the loopback port
// relayed into it and the client entry (URL and bearer token) written into
// its agents' configuration. A server is found by its NAME.conf, else by
// the runtime record of a soda-mcpd running under that name.
package mcpgrant

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/token"
)

// Resolver finds servers by name.
type Resolver struct {
	// ConfigDir holds the servers' NAME.conf (serverconf.DefaultDir).
	ConfigDir string
	// RuntimeDirs hold the runtime records NAME.status.json of running
	// servers (runstate.SearchDirs).
	RuntimeDirs []string
}

// Target is a server name resolved: by its configuration file, else by
// the runtime record of a soda-mcpd running under that name (one started
// by hand, such as "make run"), else (ResolveOrDefaults) by the defaults.
type Target struct {
	// Config is NAME.conf, or the defaults adjusted to the record (an
	// empty Path: no NAME.conf).
	Config serverconf.Server
	// Record is the live runtime record, when resolved by it, found at
	// RecordPath.
	Record     *runstate.Record
	RecordPath string
	// ConfigPath is the NAME.conf looked for.
	ConfigPath string
}

// Resolve finds server name: NAME.conf when it exists, else a live runtime
// record, else an error that says what was looked for.
func (r Resolver) Resolve(name string) (Target, error) {
	return r.resolve(name, false)
}

// ResolveOrDefaults is Resolve, except that a server neither configured
// nor running resolves to the defaults of an ad-hoc soda-mcpd (what a
// client snippet or token lookup for a server not started yet assumes).
func (r Resolver) ResolveOrDefaults(name string) (Target, error) {
	return r.resolve(name, true)
}

func (r Resolver) resolve(name string, fallback bool) (Target, error) {
	path := serverconf.PathFor(r.ConfigDir, name)
	cfg, err := loadConfig(path, name)
	if err != nil || cfg.Path != "" {
		return Target{Config: cfg, ConfigPath: path}, err
	}
	rec, recPath, rerr := runstate.Lookup(name, r.RuntimeDirs)
	if rerr == nil {
		if len(rec.Listen) == 0 {
			return Target{}, fmt.Errorf("soda-mcpd %s (pid %d, %s) serves no TCP address", name, rec.PID, recPath)
		}
		cfg.Bridge.Listen = rec.Listen[0]
		cfg.Bridge.TokenFile = rec.TokenFile
		if !rec.Auth {
			cfg.Bridge.Auth = "none"
		}
		return Target{Config: cfg, Record: &rec, RecordPath: recPath, ConfigPath: path}, nil
	}
	if fallback {
		return Target{Config: cfg, ConfigPath: path}, nil
	}
	return Target{}, fmt.Errorf("no server %q: %s does not exist, and %v; configure it (see soda.conf(5)), "+
		"start it (soda-mcpd --name %s ... -- COMMAND), or point --config-dir at the directory that holds it",
		name, path, rerr, name)
}

// Origin says, for a note to the user, how a server without a NAME.conf
// was found.
func (t Target) Origin() string {
	if t.Record != nil {
		return fmt.Sprintf("%s does not exist; using the running soda-mcpd %s (pid %d, %s)",
			t.ConfigPath, t.Config.Name, t.Record.PID, t.RecordPath)
	}
	return fmt.Sprintf("%s does not exist and no soda-mcpd %s is running; assuming an ad-hoc soda-mcpd with the defaults (Listen=%s)",
		t.ConfigPath, t.Config.Name, t.Config.Bridge.Listen)
}

// loadConfig loads NAME.conf at path. A missing file gives the defaults,
// as for a server started ad hoc ("soda-mcpd --name NAME -- COMMAND"),
// with an empty Path.
func loadConfig(path, name string) (serverconf.Server, error) {
	cfg, err := serverconf.Load(path)
	switch {
	case err == nil:
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist):
		return serverconf.Defaults(name), nil
	case errors.Is(err, fs.ErrPermission):
		return serverconf.Server{}, fmt.Errorf("cannot read %s: permission denied; run sodactl as root (sudo) "+
			"or as a user allowed to read it", path)
	default:
		// config's errors name the file, line and key already.
		return serverconf.Server{}, fmt.Errorf("invalid configuration: %w", err)
	}
}

// ReadToken reads the token file of server name, turning the usual
// failures into advice (each names the server).
func ReadToken(name, path string) (string, error) {
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
