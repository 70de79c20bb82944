// Package clientconfig renders the configuration an MCP client needs to use a
// soda-mcpd endpoint: a name, the Streamable HTTP URL and the bearer token.
//
// Each client gets a Snippet: Text is what to run or paste (meant for stdout,
// so that it can be piped or redirected), Hint says where it goes (meant for
// stderr). The formats were checked against each client's documentation:
//
//   - claude: claude mcp add --transport http NAME URL --header
//     "Authorization: Bearer TOKEN", as in
//     https://code.claude.com/docs/en/mcp ("Remote HTTP server"). --header
//     comes last because it is variadic: placed before NAME it would swallow
//     the name.
//   - codex: an [mcp_servers.NAME] table with url and http_headers in
//     ~/.codex/config.toml, per https://developers.openai.com/codex/mcp and
//     codex-rs/config/src/mcp_types.rs (http_headers holds literal header
//     values; "headers" is ignored by Codex).
//   - opencode: a "remote" entry under "mcp" in opencode.json with url,
//     enabled and headers, per https://opencode.ai/docs/mcp-servers (the V1
//     shape; OpenCode V2 still reads it, https://opencode.ai/docs/migrate-v1).
//   - vscode: an entry of type "http" under "servers" in .vscode/mcp.json
//     with url and headers, per
//     https://code.visualstudio.com/docs/copilot/reference/mcp-configuration.
//
// A server configured with Auth=none has no token: pass an empty Token and
// the snippets carry no Authorization header.
package clientconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Server is the endpoint a client is configured for.
type Server struct {
	// Name is the name the client will know the server by (the soda instance
	// name, jira in soda-mcp@jira).
	Name string
	// URL is the Streamable HTTP endpoint, such as http://127.0.0.1:18101/mcp.
	URL string
	// Token is the bearer token; empty when the server runs without auth.
	Token string
	// Headers are more request headers (a remote server's own, from the
	// user's configuration); AgentFiles writes them, Render does not.
	Headers map[string]string
	// Command, Args and Env, when Command is set, make the entry a stdio
	// server that the agent starts itself (sodactl run --mcp-inside);
	// URL, Token and Headers are then unused. AgentFiles only.
	Command string
	Args    []string
	Env     map[string]string
}

// Snippet is rendered client configuration.
type Snippet struct {
	// Text is the command or configuration fragment, ending in a newline.
	Text string
	// Hint is one line, without a trailing newline, saying where Text goes.
	Hint string
}

// Client names accepted by Render.
const (
	Claude   = "claude"
	Codex    = "codex"
	OpenCode = "opencode"
	VSCode   = "vscode"
)

// Clients returns the client names Render accepts, in display order.
func Clients() []string {
	return []string{Claude, Codex, OpenCode, VSCode}
}

// ErrUnknownClient is wrapped by Render's error for a client it does not know.
var ErrUnknownClient = errors.New("unknown client")

// Render returns the configuration snippet for client.
func Render(client string, s Server) (Snippet, error) {
	if s.Name == "" {
		return Snippet{}, errors.New("render client config: empty server name")
	}
	if s.URL == "" {
		return Snippet{}, fmt.Errorf("render client config for %s: empty URL", s.Name)
	}
	var (
		sn  Snippet
		err error
	)
	switch client {
	case Claude:
		sn = renderClaude(s)
	case Codex:
		sn = renderCodex(s)
	case OpenCode:
		sn, err = renderOpenCode(s)
	case VSCode:
		sn, err = renderVSCode(s)
	default:
		return Snippet{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownClient, client, strings.Join(Clients(), ", "))
	}
	if err != nil {
		return Snippet{}, fmt.Errorf("render %s config for %s: %w", client, s.Name, err)
	}
	if note := nameNote(s.Name); note != "" {
		sn.Hint += " " + note
	}
	return sn, nil
}

// URL returns the Streamable HTTP endpoint of a bridge listening on listen
// (host:port, as in the [Bridge] Listen= key): http://HOST:PORT/mcp. The host
// is kept as written (localhost, 127.0.0.1, ::1 …) since the bridge accepts
// exactly the Host it listens on; IPv6 addresses are bracketed.
func URL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q is not host:port: %w", listen, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("listen address %q has no fixed port; set Listen= to a port from 1 to 65535 so that clients can be configured", listen)
	}
	if host == "" {
		return "", fmt.Errorf("listen address %q has no host; use 127.0.0.1:%s or [::1]:%s", listen, port, port)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/mcp"}
	return u.String(), nil
}

func bearer(tok string) string { return "Bearer " + tok }

func renderClaude(s Server) Snippet {
	var b strings.Builder
	b.WriteString("claude mcp add --transport http ")
	b.WriteString(shellQuote(s.Name))
	b.WriteByte(' ')
	b.WriteString(shellQuote(s.URL))
	if s.Token != "" {
		b.WriteString(" --header ")
		b.WriteString(shellQuoteDouble("Authorization: " + bearer(s.Token)))
	}
	b.WriteByte('\n')
	return Snippet{
		Text: b.String(),
		Hint: "# Run this command in a shell (in your project for Claude Code's default local scope; add --scope user before the name to use it in every project).",
	}
}

func renderCodex(s Server) Snippet {
	var b strings.Builder
	fmt.Fprintf(&b, "[mcp_servers.%s]\n", tomlKey(s.Name))
	fmt.Fprintf(&b, "url = %s\n", tomlString(s.URL))
	if s.Token != "" {
		fmt.Fprintf(&b, "http_headers = { %s = %s }\n", tomlString("Authorization"), tomlString(bearer(s.Token)))
	}
	return Snippet{
		Text: b.String(),
		Hint: "# Append this to ~/.codex/config.toml (or a trusted project's .codex/config.toml), then restart Codex; the file now holds the token, keep it private.",
	}
}

type headers map[string]string

func authHeaders(tok string) headers {
	if tok == "" {
		return nil
	}
	return headers{"Authorization": bearer(tok)}
}

func renderOpenCode(s Server) (Snippet, error) {
	type remote struct {
		Type    string  `json:"type"`
		URL     string  `json:"url"`
		Enabled bool    `json:"enabled"`
		Headers headers `json:"headers,omitempty"`
	}
	doc := struct {
		Schema string            `json:"$schema"`
		MCP    map[string]remote `json:"mcp"`
	}{
		Schema: "https://opencode.ai/config.json",
		MCP: map[string]remote{s.Name: {
			Type: "remote", URL: s.URL, Enabled: true, Headers: authHeaders(s.Token),
		}},
	}
	text, err := marshalJSON(doc)
	return Snippet{
		Text: text,
		Hint: "# Merge this into opencode.json in your project (or ~/.config/opencode/opencode.json for every project); the file now holds the token, keep it private.",
	}, err
}

func renderVSCode(s Server) (Snippet, error) {
	type server struct {
		Type    string  `json:"type"`
		URL     string  `json:"url"`
		Headers headers `json:"headers,omitempty"`
	}
	doc := struct {
		Servers map[string]server `json:"servers"`
	}{
		Servers: map[string]server{s.Name: {Type: "http", URL: s.URL, Headers: authHeaders(s.Token)}},
	}
	text, err := marshalJSON(doc)
	return Snippet{
		Text: text,
		Hint: "# Merge this into .vscode/mcp.json in your workspace (or the user mcp.json from \"MCP: Open User Configuration\"); do not commit the token.",
	}, err
}

// marshalJSON renders v indented by two spaces, without HTML escaping (so a
// URL's & stays readable), ending in a newline.
func marshalJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// nameNote warns about names that some clients reject or rewrite: Claude
// Code and Codex build tool names such as mcp__NAME__tool from them, and
// those allow only letters, digits, '_' and '-'.
func nameNote(name string) string {
	if isBare(name) {
		return ""
	}
	return fmt.Sprintf("(Note: %q has characters other than letters, digits, '-' and '_'; some clients reject or rewrite such names, rename the server if yours does.)", name)
}

// isBare reports whether s is non-empty and made of A-Z a-z 0-9 _ - only:
// a TOML bare key, and safe everywhere.
func isBare(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// tomlKey returns s as a TOML key: bare when possible, else a quoted basic
// string (a dot in a bare key would make a nested table).
func tomlKey(s string) string {
	if isBare(s) {
		return s
	}
	return tomlString(s)
}

// tomlString returns s as a TOML basic string (TOML 1.0 §String): quotes,
// backslashes and control characters are escaped.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f || r == utf8.RuneError {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// shellSafe reports whether s needs no quoting in a POSIX shell word.
func shellSafe(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("@%+=:,./_-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// shellQuote returns s as one POSIX shell word: unchanged when it has only
// safe characters, else in single quotes, where an embedded single quote
// closes the quoting, is written escaped, and reopens it.
func shellQuote(s string) string {
	if shellSafe(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellQuoteDouble returns s in double quotes when that needs no escaping
// (safe characters and spaces: the usual "Authorization: Bearer HEX"), and
// falls back to shellQuote otherwise, since $, `, \, " and ! all have
// meanings inside double quotes.
func shellQuoteDouble(s string) string {
	if shellSafe(strings.ReplaceAll(s, " ", "_")) {
		return `"` + s + `"`
	}
	return shellQuote(s)
}

// AgentFile is a configuration file for an agent, relative to its $HOME.
type AgentFile struct {
	// Path is relative to the agent's home directory.
	Path string
	// Data is the file's content.
	Data []byte
}

// MCPConfigPath is where AgentFiles puts the Claude Code --mcp-config file,
// relative to the agent's home.
const MCPConfigPath = ".soda/mcp.json"

// ClaudeUserConfigPath is Claude Code's user configuration, relative to
// its home: its mcpServers are the user-scope servers that every session
// uses and "claude mcp list" shows (what "claude mcp add --scope user"
// writes).
const ClaudeUserConfigPath = ".claude.json"

// ClaudeMCPConfigArg is the argument that makes Claude Code load the MCP
// configuration file path for one session. It is a single "--flag=value"
// word on purpose: --mcp-config takes a variable number of values, so
// "--mcp-config FILE" would also swallow the positional arguments after
// it ("claude --mcp-config FILE 'fix the bug'" reads "fix the bug" as a
// second file), while after "--mcp-config=FILE" the next word is parsed on
// its own (checked with Claude Code 2.1.332).
func ClaudeMCPConfigArg(path string) string { return "--mcp-config=" + path }

// AgentFiles renders the MCP configuration that makes Claude Code (a file
// for --mcp-config, MCPConfigPath, and the same servers in user scope,
// ClaudeUserConfigPath, so that "claude mcp list" shows them), Codex
// (~/.codex/config.toml) and OpenCode (~/.config/opencode/opencode.json)
// use servers, tokens included. They are meant for a sandbox's private
// home, not a user's real one.
func AgentFiles(servers []Server) ([]AgentFile, error) {
	type claudeServer struct {
		Type    string            `json:"type"`
		URL     string            `json:"url,omitempty"`
		Headers headers           `json:"headers,omitempty"`
		Command string            `json:"command,omitempty"`
		Args    []string          `json:"args,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
	}
	type openCodeServer struct {
		Type        string            `json:"type"`
		URL         string            `json:"url,omitempty"`
		Command     []string          `json:"command,omitempty"`
		Enabled     bool              `json:"enabled"`
		Headers     headers           `json:"headers,omitempty"`
		Environment map[string]string `json:"environment,omitempty"`
	}
	claude := map[string]claudeServer{}
	open := map[string]openCodeServer{}
	var codex strings.Builder
	codex.WriteString("# Written by sodactl run: the MCP servers granted to this sandbox.\n")
	for _, s := range servers {
		if s.Command != "" {
			claude[s.Name] = claudeServer{Type: "stdio", Command: s.Command, Args: s.Args, Env: s.Env}
			open[s.Name] = openCodeServer{Type: "local", Command: append([]string{s.Command}, s.Args...), Enabled: true, Environment: s.Env}
			codex.WriteString("\n" + codexStdio(s))
			continue
		}
		h := authHeaders(s.Token)
		for k, v := range s.Headers {
			if h == nil {
				h = headers{}
			}
			if _, ok := h[k]; !ok {
				h[k] = v
			}
		}
		claude[s.Name] = claudeServer{Type: "http", URL: s.URL, Headers: h}
		open[s.Name] = openCodeServer{Type: "remote", URL: s.URL, Enabled: true, Headers: h}
		codex.WriteString("\n" + codexHTTP(s.Name, s.URL, h))
	}
	cj, err := marshalJSON(struct {
		MCPServers map[string]claudeServer `json:"mcpServers"`
	}{claude})
	if err != nil {
		return nil, err
	}
	oj, err := marshalJSON(struct {
		Schema string                    `json:"$schema"`
		MCP    map[string]openCodeServer `json:"mcp"`
	}{"https://opencode.ai/config.json", open})
	if err != nil {
		return nil, err
	}
	return []AgentFile{
		{Path: MCPConfigPath, Data: []byte(cj)},
		{Path: ClaudeUserConfigPath, Data: []byte(cj)},
		{Path: ".codex/config.toml", Data: []byte(codex.String())},
		{Path: ".config/opencode/opencode.json", Data: []byte(oj)},
	}, nil
}

// codexHTTP is Codex's table for an HTTP server with headers h.
func codexHTTP(name, url string, h headers) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[mcp_servers.%s]\n", tomlKey(name))
	fmt.Fprintf(&b, "url = %s\n", tomlString(url))
	if len(h) > 0 {
		fmt.Fprintf(&b, "http_headers = %s\n", tomlInline(h))
	}
	return b.String()
}

// codexStdio is Codex's table for a stdio server.
func codexStdio(s Server) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[mcp_servers.%s]\n", tomlKey(s.Name))
	fmt.Fprintf(&b, "command = %s\n", tomlString(s.Command))
	args := make([]string, len(s.Args))
	for i, a := range s.Args {
		args[i] = tomlString(a)
	}
	fmt.Fprintf(&b, "args = [%s]\n", strings.Join(args, ", "))
	if len(s.Env) > 0 {
		fmt.Fprintf(&b, "env = %s\n", tomlInline(s.Env))
	}
	return b.String()
}

// tomlInline is m as a TOML inline table, its keys sorted.
func tomlInline(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = tomlString(k) + " = " + tomlString(m[k])
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}
