package mcpgrant

import (
	"fmt"
	"net"
	"strconv"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/serverconf"
)

// Grant is an MCP server granted to a sandbox.
type Grant struct {
	// Entry is the server as the agents' configuration names it: its
	// name, its URL (http://127.0.0.1:PORT/mcp) and its token (empty for
	// a server with Auth=none).
	Entry clientconfig.Server
	// Port is its loopback port, relayed into the sandbox.
	Port uint16
}

// Error is a server that cannot be granted, for a reason that does not
// name it (token failures do, and are returned as ReadToken makes them).
type Error struct {
	Name string // the server
	Err  error  // what failed
}

// Error says which server failed and why.
func (e *Error) Error() string { return "soda-mcp@" + e.Name + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Grant resolves server name (Resolve) to its grant; reservedPort is a
// port the server may not use (the sandbox's proxy port). tokenFile, when
// not empty, is read instead of the configured token file.
func (r Resolver) Grant(name string, reservedPort uint16, tokenFile string) (Grant, error) {
	if err := serverconf.ValidName(name); err != nil {
		return Grant{}, &Error{Name: name, Err: err}
	}
	t, err := r.Resolve(name)
	if err != nil {
		return Grant{}, &Error{Name: name, Err: err}
	}
	cfg := t.Config
	_, portStr, err := net.SplitHostPort(cfg.Bridge.Listen)
	if err != nil {
		return Grant{}, &Error{Name: name, Err: fmt.Errorf("Listen=%s: %w", cfg.Bridge.Listen, err)}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return Grant{}, &Error{Name: name, Err: fmt.Errorf("Listen=%s has no TCP port", cfg.Bridge.Listen)}
	}
	if port == uint64(reservedPort) {
		return Grant{}, &Error{Name: name, Err: fmt.Errorf("its port %d is the sandbox's proxy port", port)}
	}
	g := Grant{Entry: clientconfig.Server{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}, Port: uint16(port)}
	if cfg.Bridge.Auth != "none" {
		if tokenFile == "" {
			tokenFile = cfg.Bridge.TokenFile
		}
		if g.Entry.Token, err = ReadToken(name, tokenFile); err != nil {
			return Grant{}, err
		}
	}
	return g, nil
}

// Ports are the grants' ports, for the sandbox's egress (MCPPorts).
func Ports(grants []Grant) []uint16 {
	ports := make([]uint16, len(grants))
	for i, g := range grants {
		ports[i] = g.Port
	}
	return ports
}

// Entries are the grants' client entries, for the agents' configuration.
func Entries(grants []Grant) []clientconfig.Server {
	entries := make([]clientconfig.Server, len(grants))
	for i, g := range grants {
		entries[i] = g.Entry
	}
	return entries
}
