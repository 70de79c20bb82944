// Package agentmcp reads an agent's own MCP configuration, in the four
// formats users have: Claude Code's .mcp.json ("mcpServers"), Codex's
// config.toml ([mcp_servers.NAME]), OpenCode's opencode.json ("mcp") and
// VS Code's mcp.json ("servers", JSON with comments). Each server is
// either a stdio command (with its environment, which may hold secrets)
// or a remote URL (http or sse). It is the input of sodactl run
// --mcp-config (issue 15): the stdio servers are to run on the host,
// behind soda's bridge.
package agentmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/tailscale/hujson"
)

// Formats.
const (
	FormatClaude   = "claude"   // .mcp.json, ~/.claude.json: {"mcpServers": {...}}
	FormatCodex    = "codex"    // config.toml: [mcp_servers.NAME]
	FormatOpenCode = "opencode" // opencode.json: {"mcp": {...}}
	FormatVSCode   = "vscode"   // .vscode/mcp.json: {"servers": {...}}
)

// Server is one configured MCP server.
type Server struct {
	Name string
	// Command and Args are a stdio server's; Env its environment (values
	// may be secrets: they must stay on the host).
	Command string
	Args    []string
	Env     map[string]string
	// EnvVars are variables whose values the server gets from the
	// caller's environment (Codex's env_vars), filled in by Expand.
	EnvVars []string
	// URL is a remote server's (Transport "http" or "sse"); Headers its
	// request headers (may hold tokens).
	URL       string
	Transport string // "stdio", "http" or "sse"
	Headers   map[string]string
	// Disabled servers are listed but not started (OpenCode's enabled:
	// false, Codex's enabled = false).
	Disabled bool
}

// Config is a parsed configuration.
type Config struct {
	Format  string
	Servers []Server // sorted by name
}

// Parse reads data, the file name (its base name and extension decide
// between TOML and JSON; the keys decide among the JSON formats).
func Parse(name string, data []byte) (*Config, error) {
	if strings.EqualFold(filepath.Ext(name), ".toml") {
		return parseCodex(name, data)
	}
	std, err := hujson.Standardize(data) // VS Code and OpenCode allow comments and trailing commas
	if err != nil {
		return nil, fmt.Errorf("%s: not JSON (nor JSON with comments): %w", name, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(std, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case top["mcpServers"] != nil:
		return parseClaude(name, top["mcpServers"])
	case top["servers"] != nil:
		return parseVSCode(name, top["servers"])
	case top["mcp"] != nil:
		return parseOpenCode(name, top["mcp"])
	}
	return nil, fmt.Errorf("%s: no MCP servers found (want Claude's \"mcpServers\", VS Code's \"servers\", OpenCode's \"mcp\", or a Codex config.toml)", name)
}

type jsonServer struct {
	Type        string            `json:"type"`
	Command     json.RawMessage   `json:"command"` // a string, or (OpenCode) a list
	Args        []string          `json:"args"`
	Env         map[string]string `json:"env"`
	Environment map[string]string `json:"environment"` // OpenCode
	URL         string            `json:"url"`
	Headers     map[string]string `json:"headers"`
	Enabled     *bool             `json:"enabled"`
	Disabled    bool              `json:"disabled"`
}

func decodeServers(file string, raw json.RawMessage) (map[string]jsonServer, error) {
	// encoding/json takes "Command" (or "commanD", "argſ") for
	// "command"; the agents, in JavaScript, do not: such a key would make
	// soda run what the agent reading the same file would not. These
	// are the keys jsonServer reads.
	jsonKeys := []string{"type", "command", "args", "env", "environment", "url", "headers", "enabled", "disabled"}
	var entries map[string]map[string]json.RawMessage
	if json.Unmarshal(raw, &entries) == nil {
		for name, e := range entries {
			for k := range e {
				if err := exactKey(k, jsonKeys); err != nil {
					return nil, fmt.Errorf("%s: server %q: %w", file, name, err)
				}
			}
		}
	}
	var m map[string]jsonServer
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: servers: %w", file, err)
	}
	return m, nil
}

// exactKey refuses key when it is one of known but for case (as
// strings.EqualFold, which encoding/json and BurntSushi/toml match
// struct fields with), since the agents' readers are case-sensitive.
func exactKey(key string, known []string) error {
	for _, k := range known {
		if key != k && strings.EqualFold(key, k) {
			return fmt.Errorf("key %q: keys are case-sensitive, the agents read %q", key, k)
		}
	}
	return nil
}

func parseClaude(file string, raw json.RawMessage) (*Config, error) {
	m, err := decodeServers(file, raw)
	if err != nil {
		return nil, err
	}
	c := &Config{Format: FormatClaude}
	for name, s := range m {
		srv, err := fromJSON(file, name, s, s.Env)
		if err != nil {
			return nil, err
		}
		srv.Disabled = s.Disabled
		c.Servers = append(c.Servers, srv)
	}
	return c.sorted(), nil
}

func parseVSCode(file string, raw json.RawMessage) (*Config, error) {
	m, err := decodeServers(file, raw)
	if err != nil {
		return nil, err
	}
	c := &Config{Format: FormatVSCode}
	for name, s := range m {
		srv, err := fromJSON(file, name, s, s.Env)
		if err != nil {
			return nil, err
		}
		c.Servers = append(c.Servers, srv)
	}
	return c.sorted(), nil
}

func parseOpenCode(file string, raw json.RawMessage) (*Config, error) {
	m, err := decodeServers(file, raw)
	if err != nil {
		return nil, err
	}
	c := &Config{Format: FormatOpenCode}
	for name, s := range m {
		switch s.Type {
		case "local":
			s.Type = "stdio"
		case "remote":
			s.Type = "http"
		}
		srv, err := fromJSON(file, name, s, s.Environment)
		if err != nil {
			return nil, err
		}
		srv.Disabled = s.Enabled != nil && !*s.Enabled
		c.Servers = append(c.Servers, srv)
	}
	return c.sorted(), nil
}

// fromJSON builds a Server from a JSON entry.
func fromJSON(file, name string, s jsonServer, env map[string]string) (Server, error) {
	srv := Server{Name: name, Env: env, Headers: s.Headers}
	bad := func(f string, a ...any) (Server, error) {
		return Server{}, fmt.Errorf("%s: server %q: %s", file, name, fmt.Sprintf(f, a...))
	}
	if err := checkName(name); err != nil {
		return bad("%v", err)
	}
	if len(s.Command) > 0 && string(s.Command) != "null" {
		var one string
		var list []string
		switch {
		case json.Unmarshal(s.Command, &one) == nil:
			srv.Command, srv.Args = one, s.Args
		case json.Unmarshal(s.Command, &list) == nil && len(list) > 0:
			srv.Command, srv.Args = list[0], append(list[1:], s.Args...)
		default:
			return bad("command: want a string or a list of strings")
		}
	}
	switch {
	case srv.Command != "" && s.URL != "":
		return bad("both a command and a url")
	case srv.Command != "":
		if s.Type != "" && s.Type != "stdio" {
			return bad("type %q with a command", s.Type)
		}
		srv.Transport = "stdio"
	case s.URL != "":
		t := s.Type
		if t == "" || t == "streamable-http" || t == "streamableHttp" {
			t = "http"
		}
		if t != "http" && t != "sse" {
			return bad("type %q: http or sse", s.Type)
		}
		if err := checkURL(s.URL); err != nil {
			return bad("%v", err)
		}
		srv.URL, srv.Transport = s.URL, t
	default:
		return bad("neither a command nor a url")
	}
	return srv, nil
}

type codexFile struct {
	MCPServers map[string]struct {
		Command string            `toml:"command"`
		Args    []string          `toml:"args"`
		Env     map[string]string `toml:"env"`
		EnvVars []string          `toml:"env_vars"`
		URL     string            `toml:"url"`
		Enabled *bool             `toml:"enabled"`
		Headers map[string]string `toml:"http_headers"`
	} `toml:"mcp_servers"`
}

func parseCodex(file string, data []byte) (*Config, error) {
	var f codexFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// BurntSushi/toml takes [MCP_servers.x] or Command = for what Codex
	// (serde, case-sensitive) ignores. These are the keys codexFile reads.
	codexKeys := []string{"command", "args", "env", "env_vars", "url", "enabled", "http_headers"}
	for _, k := range md.Keys() {
		err := exactKey(k[0], []string{"mcp_servers"})
		if err == nil && len(k) >= 3 && k[0] == "mcp_servers" {
			err = exactKey(k[2], codexKeys)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, k, err)
		}
	}
	if len(f.MCPServers) == 0 {
		return nil, fmt.Errorf("%s: no [mcp_servers.NAME] table", file)
	}
	c := &Config{Format: FormatCodex}
	for name, s := range f.MCPServers {
		js := jsonServer{URL: s.URL, Args: s.Args, Headers: s.Headers}
		if s.Command != "" {
			js.Command, _ = json.Marshal(s.Command)
		}
		srv, err := fromJSON(file, name, js, s.Env)
		if err != nil {
			return nil, err
		}
		srv.Disabled = s.Enabled != nil && !*s.Enabled
		srv.EnvVars = s.EnvVars
		c.Servers = append(c.Servers, srv)
	}
	return c.sorted(), nil
}

func (c *Config) sorted() *Config {
	sort.Slice(c.Servers, func(i, j int) bool { return c.Servers[i].Name < c.Servers[j].Name })
	return c
}

// checkName accepts the names agents use: letters, digits, '-', '_', '.'.
func checkName(n string) error {
	if n == "" || len(n) > 64 {
		return errors.New("name: 1 to 64 characters")
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q: letters, digits, '-', '_' and '.' only", n)
		}
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want http:// or https:// with a host", s)
	}
	return nil
}

// HostPort is a remote server's host:port (the port from the scheme when
// absent), what the sandbox's allow-list grants.
func (s Server) HostPort() (string, error) {
	u, err := url.Parse(s.URL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("server %s: no url", s.Name)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Hostname()) + ":" + port, nil
}
