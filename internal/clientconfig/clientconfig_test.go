package clientconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	neturl "net/url"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/soda-project/soda/internal/agentmcp"
)

const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var jira = Server{Name: "jira", URL: "http://127.0.0.1:18101/mcp", Token: tok}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		client string
		srv    Server
		want   string
	}{
		{
			client: Claude, srv: jira,
			want: `claude mcp add --transport http jira http://127.0.0.1:18101/mcp --header "Authorization: Bearer ` + tok + `"` + "\n",
		},
		{
			client: Codex, srv: jira,
			want: `[mcp_servers.jira]
url = "http://127.0.0.1:18101/mcp"
http_headers = { "Authorization" = "Bearer ` + tok + `" }
`,
		},
		{
			client: OpenCode, srv: jira,
			want: `{
  "$schema": "https://opencode.ai/config.json",
  "mcp": {
    "jira": {
      "type": "remote",
      "url": "http://127.0.0.1:18101/mcp",
      "enabled": true,
      "headers": {
        "Authorization": "Bearer ` + tok + `"
      }
    }
  }
}
`,
		},
		{
			client: VSCode, srv: jira,
			want: `{
  "servers": {
    "jira": {
      "type": "http",
      "url": "http://127.0.0.1:18101/mcp",
      "headers": {
        "Authorization": "Bearer ` + tok + `"
      }
    }
  }
}
`,
		},
		// No token (Auth=none): no header anywhere.
		{
			client: Claude, srv: Server{Name: "fs", URL: "http://[::1]:18102/mcp"},
			// Brackets are glob characters: quoted.
			want: "claude mcp add --transport http fs 'http://[::1]:18102/mcp'\n",
		},
		{
			client: Codex, srv: Server{Name: "fs", URL: "http://[::1]:18102/mcp"},
			want: "[mcp_servers.fs]\nurl = \"http://[::1]:18102/mcp\"\n",
		},
		{
			client: OpenCode, srv: Server{Name: "fs", URL: "http://localhost:18102/mcp"},
			want: `{
  "$schema": "https://opencode.ai/config.json",
  "mcp": {
    "fs": {
      "type": "remote",
      "url": "http://localhost:18102/mcp",
      "enabled": true
    }
  }
}
`,
		},
		{
			client: VSCode, srv: Server{Name: "fs", URL: "http://localhost:18102/mcp"},
			want: `{
  "servers": {
    "fs": {
      "type": "http",
      "url": "http://localhost:18102/mcp"
    }
  }
}
`,
		},
		// Names that are valid soda instance names but not TOML bare keys.
		{
			client: Codex, srv: Server{Name: "jira.prod", URL: jira.URL, Token: tok},
			want: `[mcp_servers."jira.prod"]
url = "http://127.0.0.1:18101/mcp"
http_headers = { "Authorization" = "Bearer ` + tok + `" }
`,
		},
		// Hostile values are escaped, not interpreted.
		{
			client: Claude, srv: Server{Name: "a b", URL: "http://x/$(id)", Token: `t"$x` + "`!'"},
			want: `claude mcp add --transport http 'a b' 'http://x/$(id)' --header 'Authorization: Bearer t"$x` + "`!'\\''" + `'` + "\n",
		},
		{
			client: Codex, srv: Server{Name: `q"\`, URL: "http://x/\n", Token: "a\tb\x01\x7f"},
			want: `[mcp_servers."q\"\\"]
url = "http://x/\n"
http_headers = { "Authorization" = "Bearer a\tb\u0001\u007F" }
`,
		},
		{
			client: VSCode, srv: Server{Name: `<q"\>`, URL: "http://x/?a=1&b=2", Token: "\n"},
			want: `{
  "servers": {
    "<q\"\\>": {
      "type": "http",
      "url": "http://x/?a=1&b=2",
      "headers": {
        "Authorization": "Bearer \n"
      }
    }
  }
}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.client+"/"+tt.srv.Name, func(t *testing.T) {
			got, err := Render(tt.client, tt.srv)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got.Text != tt.want {
				t.Errorf("Render text:\n%s\nwant:\n%s", got.Text, tt.want)
			}
			if got.Hint == "" || strings.Contains(got.Hint, "\n") {
				t.Errorf("hint %q must be one non-empty line", got.Hint)
			}
		})
	}
}

func TestHints(t *testing.T) {
	wants := map[string]string{
		Claude:   "shell",
		Codex:    "~/.codex/config.toml",
		OpenCode: "opencode.json",
		VSCode:   ".vscode/mcp.json",
	}
	for _, c := range Clients() {
		sn, err := Render(c, jira)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sn.Hint, wants[c]) {
			t.Errorf("%s hint %q does not mention %q", c, sn.Hint, wants[c])
		}
		if strings.Contains(sn.Hint, "Note:") {
			t.Errorf("%s hint warns about a plain name: %q", c, sn.Hint)
		}
		if strings.Contains(sn.Hint, tok) {
			t.Errorf("%s hint contains the token", c)
		}
	}
	sn, err := Render(Codex, Server{Name: "jira.prod", URL: jira.URL})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sn.Hint, "Note:") {
		t.Errorf("hint for a dotted name has no note: %q", sn.Hint)
	}
}

// TestJSONRoundTrip checks that the JSON snippets decode to the intended
// values whatever the input.
func TestJSONRoundTrip(t *testing.T) {
	srvs := []Server{jira, {Name: `we"ird\name`, URL: "http://127.0.0.1:1/mcp?x=<y>&z", Token: "a\"b\\c\u2028"}}
	for _, s := range srvs {
		for _, c := range []string{OpenCode, VSCode} {
			sn, err := Render(c, s)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal([]byte(sn.Text), &doc); err != nil {
				t.Fatalf("%s: invalid JSON: %v\n%s", c, err, sn.Text)
			}
			top := "servers"
			if c == OpenCode {
				top = "mcp"
				var schema string
				if err := json.Unmarshal(doc["$schema"], &schema); err != nil || schema != "https://opencode.ai/config.json" {
					t.Errorf("opencode $schema = %q, %v", schema, err)
				}
			}
			var entries map[string]map[string]any
			if err := json.Unmarshal(doc[top], &entries); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			entry := entries[s.Name]
			if entry == nil {
				t.Fatalf("%s: no entry %q in %s", c, s.Name, sn.Text)
			}
			if entry["url"] != s.URL {
				t.Errorf("%s: url = %v, want %q", c, entry["url"], s.URL)
			}
			h, _ := entry["headers"].(map[string]any)
			if h["Authorization"] != "Bearer "+s.Token {
				t.Errorf("%s: Authorization = %v", c, h["Authorization"])
			}
		}
	}
}

// TestClaudeShell runs the claude command through /bin/sh, with claude
// replaced by printf, to check that the shell sees the intended words.
func TestClaudeShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	srvs := []Server{
		jira,
		{Name: "it's", URL: "http://127.0.0.1:1/mcp?a=1&b=2;c", Token: `$HOME "x" \n` + "`id` !!"},
		{Name: "plain", URL: "http://localhost:2/mcp"},
	}
	for _, s := range srvs {
		sn, err := Render(Claude, s)
		if err != nil {
			t.Fatal(err)
		}
		cmd := strings.Replace(sn.Text, "claude", `printf '%s\0'`, 1)
		out, err := exec.Command(sh, "-c", cmd).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", cmd, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		want := []string{"mcp", "add", "--transport", "http", s.Name, s.URL}
		if s.Token != "" {
			want = append(want, "--header", "Authorization: Bearer "+s.Token)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("shell words of %q:\n got %q\nwant %q", sn.Text, got, want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		client string
		srv    Server
		is     error
		want   string
	}{
		{client: "cursor", srv: jira, is: ErrUnknownClient, want: "claude, codex, opencode, vscode"},
		{client: "", srv: jira, is: ErrUnknownClient},
		{client: Claude, srv: Server{URL: jira.URL}, want: "empty server name"},
		{client: Claude, srv: Server{Name: "x"}, want: "empty URL"},
	}
	for _, tt := range tests {
		_, err := Render(tt.client, tt.srv)
		if err == nil {
			t.Errorf("Render(%q, %+v) succeeded", tt.client, tt.srv)
			continue
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("Render(%q): err = %v, want %v", tt.client, err, tt.is)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Render(%q): err = %q, want it to mention %q", tt.client, err, tt.want)
		}
	}
}

func TestURL(t *testing.T) {
	tests := []struct {
		listen, want, err string
	}{
		{listen: "127.0.0.1:18100", want: "http://127.0.0.1:18100/mcp"},
		{listen: "localhost:18101", want: "http://localhost:18101/mcp"},
		{listen: "[::1]:18102", want: "http://[::1]:18102/mcp"},
		{listen: "127.0.0.2:1", want: "http://127.0.0.2:1/mcp"},
		{listen: "127.0.0.1:0", err: "no fixed port"},
		{listen: "127.0.0.1", err: "not host:port"},
		{listen: "::1", err: "not host:port"},
		{listen: ":18100", err: "no host"},
		{listen: "127.0.0.1:http", err: "no fixed port"},
		{listen: "127.0.0.1:70000", err: "no fixed port"},
	}
	for _, tt := range tests {
		got, err := URL(tt.listen)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("URL(%q) = %q, %v; want error containing %q", tt.listen, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("URL(%q) = %q, %v; want %q", tt.listen, got, err, tt.want)
		}
	}
}

func TestTOMLString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{"\b\t\n\f\r", `"\b\t\n\f\r"`},
		{"\x00\x1f\x7f", `"\u0000\u001F\u007F"`},
		{"é✓", `"é✓"`},
		{"\xff", `"\uFFFD"`},
	}
	for _, tt := range tests {
		if got := tomlString(tt.in); got != tt.want {
			t.Errorf("tomlString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTOMLKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"jira", "jira"},
		{"My_Server-2", "My_Server-2"},
		{"a.b", `"a.b"`},
		{"", `""`},
		{"sp ace", `"sp ace"`},
	}
	for _, tt := range tests {
		if got := tomlKey(tt.in); got != tt.want {
			t.Errorf("tomlKey(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestClients(t *testing.T) {
	want := []string{"claude", "codex", "opencode", "vscode"}
	if got := Clients(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Clients() = %q, want %q", got, want)
	}
	// Every listed client renders.
	for _, c := range Clients() {
		sn, err := Render(c, jira)
		if err != nil {
			t.Fatalf("Render(%q): %v", c, err)
		}
		if !strings.HasSuffix(sn.Text, "\n") || !bytes.Contains([]byte(sn.Text), []byte(tok)) {
			t.Errorf("Render(%q) text %q must end in a newline and hold the token", c, sn.Text)
		}
	}
}

func TestAgentFiles(t *testing.T) {
	files, err := AgentFiles([]Server{
		{Name: "jira", URL: "http://127.0.0.1:18101/mcp", Token: "abc"},
		{Name: "open", URL: "http://127.0.0.1:18103/mcp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]string{}
	for _, f := range files {
		byPath[f.Path] = string(f.Data)
	}
	var claude struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(byPath[MCPConfigPath]), &claude); err != nil {
		t.Fatalf("claude config: %v\n%s", err, byPath[MCPConfigPath])
	}
	if j := claude.MCPServers["jira"]; j.Type != "http" || j.URL != "http://127.0.0.1:18101/mcp" || j.Headers["Authorization"] != "Bearer abc" {
		t.Errorf("claude jira entry = %+v", j)
	}
	if o := claude.MCPServers["open"]; o.Headers != nil {
		t.Errorf("server without token got headers: %+v", o)
	}
	// "claude mcp list" reads the user scope of ~/.claude.json, not the
	// session's --mcp-config file: the grants must be there too.
	if byPath[ClaudeUserConfigPath] != byPath[MCPConfigPath] {
		t.Errorf("~/.claude.json = %q, want the servers of %s (%q)", byPath[ClaudeUserConfigPath], MCPConfigPath, byPath[MCPConfigPath])
	}
	codex := byPath[".codex/config.toml"]
	for _, want := range []string{"[mcp_servers.jira]", `url = "http://127.0.0.1:18101/mcp"`, `"Authorization" = "Bearer abc"`, "[mcp_servers.open]"} {
		if !strings.Contains(codex, want) {
			t.Errorf("codex config lacks %q:\n%s", want, codex)
		}
	}
	var oc struct {
		MCP map[string]struct {
			Type    string `json:"type"`
			Enabled bool   `json:"enabled"`
		} `json:"mcp"`
	}
	if err := json.Unmarshal([]byte(byPath[".config/opencode/opencode.json"]), &oc); err != nil || oc.MCP["jira"].Type != "remote" || !oc.MCP["jira"].Enabled {
		t.Errorf("opencode config: %v %+v", err, oc)
	}
}

func TestClaudeMCPConfigArg(t *testing.T) {
	// One word: a separate value would start --mcp-config's variadic list.
	if got := ClaudeMCPConfigArg("/home/agent/.soda/mcp.json"); got != "--mcp-config=/home/agent/.soda/mcp.json" {
		t.Errorf("ClaudeMCPConfigArg = %q", got)
	}
}

// TestAgentFilesEntries: an HTTP entry with a remote server's own headers
// and a stdio entry (run inside the sandbox) read back, through each
// agent's format as agentmcp parses it, as what was written.
func TestAgentFilesEntries(t *testing.T) {
	files, err := AgentFiles([]Server{
		{Name: "remote", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"X-Api-Key": "k"}},
		{Name: "run", URL: "http://127.0.0.1:4000/mcp", Token: "tok"},
		{Name: "fs", Command: "npx", Args: []string{"-y", "server-filesystem", "/w"}, Env: map[string]string{"A": "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f.Path, func(t *testing.T) {
			c, err := agentmcp.Parse(f.Path, f.Data)
			if err != nil {
				t.Fatalf("%v\n%s", err, f.Data)
			}
			if len(c.Servers) != 3 {
				t.Fatalf("%d servers:\n%s", len(c.Servers), f.Data)
			}
			fs, remote, run := c.Servers[0], c.Servers[1], c.Servers[2]
			if fs.Transport != "stdio" || fs.Command != "npx" || strings.Join(fs.Args, " ") != "-y server-filesystem /w" || fs.Env["A"] != "b" {
				t.Errorf("stdio entry: %+v\n%s", fs, f.Data)
			}
			if remote.URL != "https://mcp.example.com/mcp" || remote.Headers["X-Api-Key"] != "k" {
				t.Errorf("remote entry: %+v\n%s", remote, f.Data)
			}
			if run.URL != "http://127.0.0.1:4000/mcp" || run.Headers["Authorization"] != "Bearer tok" {
				t.Errorf("run entry: %+v\n%s", run, f.Data)
			}
		})
	}
}

// FuzzAgentFiles: the files AgentFiles writes into a sandbox's home read
// back, through agentmcp.Parse (soda's reader of the agents' files), as
// the servers they were written for, in every agent's format: an HTTP
// entry's URL, token and headers, a stdio entry's command, arguments and
// environment, whatever bytes (UTF-8) they hold. Seeded from
// TestAgentFilesEntries's servers.
func FuzzAgentFiles(f *testing.F) {
	f.Add("remote", "https://mcp.example.com/mcp", "", "X-Api-Key", "k", "", "", "", "")
	f.Add("run", "http://127.0.0.1:4000/mcp", "tok", "", "", "", "", "", "")
	f.Add("fs", "", "", "", "", "npx", "server-filesystem", "A", "b")
	f.Add("we.ird", "http://127.0.0.1:1/mcp?x=<y>&z", "a\"b\\c\u2028", "Authorization", "x", "", "", "", "")
	f.Add("t", "", "", "", "", "a\x00\x1f\x7f\"\\", "\b\t\n\f\r", "é✓", "\U0001F600")
	f.Fuzz(func(t *testing.T, name, url, token, hk, hv, command, arg, ek, ev string) {
		for _, s := range []string{name, url, token, hk, hv, command, arg, ek, ev} {
			if !utf8.ValidString(s) {
				return // JSON cannot carry it: not a name or value of a grant
			}
		}
		if !grantName(name) {
			return // what no grant is named (mcpgrant, agentmcp)
		}
		if u, err := neturl.Parse(url); command == "" && (err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
			return // not an endpoint of a grant either
		}
		s := Server{Name: name, URL: url, Token: token, Command: command}
		want := agentmcp.Server{Name: name}
		if command != "" {
			s.Args, s.Env = []string{arg}, map[string]string{ek: ev}
			want.Transport, want.Command, want.Args, want.Env = "stdio", command, s.Args, s.Env
		} else {
			s.Headers = map[string]string{hk: hv}
			want.Transport, want.URL, want.Headers = "http", url, map[string]string{hk: hv}
			if token != "" {
				want.Headers["Authorization"] = "Bearer " + token
			}
		}
		files, err := AgentFiles([]Server{s})
		if err != nil {
			t.Fatalf("AgentFiles(%+v): %v", s, err)
		}
		for _, file := range files {
			c, err := agentmcp.Parse(file.Path, file.Data)
			if err != nil {
				t.Fatalf("%s for %+v: %v\n%s", file.Path, s, err, file.Data)
			}
			if len(c.Servers) != 1 || !reflect.DeepEqual(c.Servers[0], want) {
				t.Fatalf("%s for %+v reads as %+v, want %+v\n%s", file.Path, s, c.Servers, want, file.Data)
			}
		}
	})
}

// grantName says whether name is one a grant can have: 1 to 64 letters,
// digits, '-', '_' and '.'.
func grantName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}
