package agentmcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/tailscale/hujson"
)

// Endpoint is an HTTP entry: where a server that runs on the host is
// reached instead of its command (a Streamable HTTP URL and its bearer
// token), or a remote server with its variables expanded (Headers).
type Endpoint struct {
	URL, Token string
	Headers    map[string]string
}

// headers are the entry's request headers.
func (ep Endpoint) headers() map[string]string {
	h := maps.Clone(ep.Headers)
	if ep.Token != "" {
		if h == nil {
			h = map[string]string{}
		}
		h["Authorization"] = "Bearer " + ep.Token
	}
	return h
}

// Rewrite returns the configuration file data (read by Parse as name)
// with each server named in http turned into an HTTP entry for its
// Endpoint (for a remote server, its entry with variables expanded), in the file's own format, and each server named in drop
// removed; the rest of the file is kept (JSON comments are not, and keys
// come out sorted). It is what a sandbox sees in place of the file: the
// commands and environments of the servers the host runs are not in it.
func Rewrite(name string, data []byte, http map[string]Endpoint, drop []string) ([]byte, error) {
	c, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	if c.Format == FormatCodex {
		return rewriteCodex(name, data, http, drop)
	}
	std, err := hujson.Standardize(bytes.Clone(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(std, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	key := map[string]string{FormatClaude: "mcpServers", FormatVSCode: "servers", FormatOpenCode: "mcp"}[c.Format]
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(top[key], &servers); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", name, key, err)
	}
	for _, d := range drop {
		delete(servers, d)
	}
	for n, ep := range http {
		entry := map[string]any{"type": "http", "url": ep.URL}
		if c.Format == FormatOpenCode {
			entry["type"], entry["enabled"] = "remote", true
		}
		if h := ep.headers(); len(h) > 0 {
			entry["headers"] = h
		}
		raw, err := json.Marshal(entry)
		if err != nil {
			return nil, err
		}
		servers[n] = raw
	}
	if top[key], err = json.Marshal(servers); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// rewriteCodex is Rewrite for a Codex config.toml: [mcp_servers.NAME]
// gets url and http_headers (literal header values).
func rewriteCodex(name string, data []byte, http map[string]Endpoint, drop []string) ([]byte, error) {
	var top map[string]any
	if _, err := toml.Decode(string(data), &top); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	servers, ok := top["mcp_servers"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: no [mcp_servers.NAME] table", name)
	}
	for _, d := range drop {
		delete(servers, d)
	}
	for n, ep := range http {
		entry := map[string]any{"url": ep.URL}
		if h := ep.headers(); len(h) > 0 {
			entry["http_headers"] = h
		}
		servers[n] = entry
	}
	var b strings.Builder
	b.WriteString("# Shown by sodactl run: the servers it runs on the host are HTTP entries here.\n")
	if err := toml.NewEncoder(&b).Encode(top); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []byte(b.String()), nil
}
