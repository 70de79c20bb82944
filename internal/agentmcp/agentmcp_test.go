package agentmcp

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The same two servers (a stdio one with a secret in its environment, a
// remote one) in each format.
var formats = []struct {
	file, format, data string
}{
	{".mcp.json", FormatClaude, `{"mcpServers": {
  "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"API_KEY": "s3cret"}},
  "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}}
}}`},
	{"config.toml", FormatCodex, `model = "o4"
[mcp_servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { API_KEY = "s3cret" }

[mcp_servers.remote]
url = "https://mcp.example.com/mcp"
`},
	{"opencode.json", FormatOpenCode, `{
  // comments are allowed
  "$schema": "https://opencode.ai/config.json",
  "mcp": {
    "everything": {"type": "local", "command": ["npx", "-y", "@modelcontextprotocol/server-everything"], "environment": {"API_KEY": "s3cret"}, "enabled": true},
    "remote": {"type": "remote", "url": "https://mcp.example.com/mcp"},
  },
}`},
	{"mcp.json", FormatVSCode, `{
  "inputs": [],
  "servers": {
    "everything": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"API_KEY": "s3cret"}},
    /* a remote one */
    "remote": {"type": "http", "url": "https://mcp.example.com/mcp"}
  }
}`},
}

func TestParseFormats(t *testing.T) {
	for _, f := range formats {
		t.Run(f.format, func(t *testing.T) {
			c, err := Parse(f.file, []byte(f.data))
			if err != nil {
				t.Fatal(err)
			}
			if c.Format != f.format || len(c.Servers) != 2 {
				t.Fatalf("%+v", c)
			}
			e, r := c.Servers[0], c.Servers[1]
			if e.Name != "everything" || e.Transport != "stdio" || e.Command != "npx" || strings.Join(e.Args, " ") != "-y @modelcontextprotocol/server-everything" || e.Env["API_KEY"] != "s3cret" {
				t.Errorf("stdio server: %+v", e)
			}
			if r.Name != "remote" || r.Transport != "http" || r.URL != "https://mcp.example.com/mcp" {
				t.Errorf("remote server: %+v", r)
			}
			if hp, err := r.HostPort(); err != nil || hp != "mcp.example.com:443" {
				t.Errorf("HostPort = %q, %v", hp, err)
			}
		})
	}
}

// parseHostileCase is a file Parse refuses and what its error says.
type parseHostileCase struct {
	file, data, want string
}

// parseHostileCases are TestParseHostile's table and seeds of FuzzParse.
func parseHostileCases() []parseHostileCase {
	return []parseHostileCase{
		{"x.json", `{"mcpServers": {"a": {}}}`, "neither a command nor a url"},
		{"x.json", `{"mcpServers": {"a": {"command": "x", "url": "http://h/"}}}`, "both"},
		{"x.json", `{"mcpServers": {"a b": {"command": "x"}}}`, "letters, digits"},
		{"x.json", `{"mcpServers": {"a": {"url": "file:///etc/passwd"}}}`, "http:// or https://"},
		{"x.json", `{"mcpServers": {"a": {"type": "ws", "url": "http://h/"}}}`, "http or sse"},
		{"x.json", `{"mcpServers": {"a": {"command": 7}}}`, "string or a list"},
		{"x.json", `{"other": 1}`, "no MCP servers"},
		{"x.json", `{"mcpServers": `, "not JSON"},
		{"c.toml", `[mcp_servers`, "c.toml"},
		{"c.toml", `model = "x"`, "no [mcp_servers.NAME]"},
		// Keys the agents would not read (they are case-sensitive),
		// which Go's decoders take for theirs (found by FuzzParse:
		// Rewrite then found no mcp_servers table).
		{"x.json", `{"mcpServers": {"a": {"Command": "x"}}}`, `key "Command": keys are case-sensitive`},
		{"x.json", `{"mcpServers": {"a": {"command": "x", "argſ": ["y"]}}}`, "case-sensitive"},
		{"x.json", `{"servers": {"a": {"type": "stdio", "command": "x", "ENV": {"A": "b"}}}}`, "case-sensitive"},
		{"c.toml", "[mCp_servers.a]\ncommand = \"x\"\n", "case-sensitive"},
		{"c.toml", "[mcp_servers.a]\nCommand = \"x\"\n", "case-sensitive"},
	}
}

func TestParseHostile(t *testing.T) {
	for _, tc := range parseHostileCases() {
		if _, err := Parse(tc.file, []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want an error saying %q", tc.file, tc.data, err, tc.want)
		}
	}
}

func TestDisabled(t *testing.T) {
	c, err := Parse("opencode.json", []byte(`{"mcp": {"off": {"type": "local", "command": ["x"], "enabled": false}}}`))
	if err != nil || !c.Servers[0].Disabled {
		t.Errorf("%+v %v", c, err)
	}
}

// TestRewrite: in each format, the stdio server becomes an HTTP entry
// (parsed back as one, with its token), its command and secret are gone,
// the remote one and the rest of the file stay, a dropped one goes.
func TestRewrite(t *testing.T) {
	for _, f := range formats {
		t.Run(f.format, func(t *testing.T) {
			out, err := Rewrite(f.file, []byte(f.data), map[string]Endpoint{"everything": {URL: "http://127.0.0.1:4242/mcp", Token: "tok"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, gone := range []string{"s3cret", "npx", "server-everything"} {
				if strings.Contains(string(out), gone) {
					t.Errorf("%s still in:\n%s", gone, out)
				}
			}
			c, err := Parse(f.file, out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if c.Format != f.format || len(c.Servers) != 2 {
				t.Fatalf("%+v\n%s", c, out)
			}
			e, r := c.Servers[0], c.Servers[1]
			if e.Transport != "http" || e.URL != "http://127.0.0.1:4242/mcp" || e.Headers["Authorization"] != "Bearer tok" || e.Command != "" || len(e.Env) != 0 {
				t.Errorf("rewritten server: %+v\n%s", e, out)
			}
			if r.URL != "https://mcp.example.com/mcp" {
				t.Errorf("remote server: %+v", r)
			}
			if keep := map[string]string{FormatCodex: `model = "o4"`, FormatOpenCode: `"$schema"`, FormatVSCode: `"inputs"`}[f.format]; keep != "" && !strings.Contains(string(out), keep) {
				t.Errorf("lost %s:\n%s", keep, out)
			}
			out, err = Rewrite(f.file, []byte(f.data), nil, []string{"everything"})
			if err != nil {
				t.Fatal(err)
			}
			if c, err := Parse(f.file, out); err != nil || len(c.Servers) != 1 || c.Servers[0].Name != "remote" || strings.Contains(string(out), "s3cret") {
				t.Errorf("drop: %v %+v\n%s", err, c, out)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"TOKEN": "t0k", "DIR": "/srv"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name, file, data string
		want             Server // Command, Args[0], Env["K"], URL or Headers["H"] checked when set
		err              string
	}{
		{"claude", ".mcp.json", `{"mcpServers": {"s": {"command": "${DIR}/bin/srv", "args": ["${MISSING:-def}"], "env": {"K": "Bearer ${TOKEN}"}}}}`,
			Server{Command: "/srv/bin/srv", Args: []string{"def"}, Env: map[string]string{"K": "Bearer t0k"}}, ""},
		{"claude unset", ".mcp.json", `{"mcpServers": {"s": {"command": "srv", "env": {"K": "${MISSING}"}}}}`, Server{}, "${MISSING} is not set"},
		{"claude remote", ".mcp.json", `{"mcpServers": {"s": {"type": "http", "url": "https://x.example/mcp", "headers": {"H": "${TOKEN}"}}}}`,
			Server{Headers: map[string]string{"H": "t0k"}}, ""},
		{"vscode", "mcp.json", `{"servers": {"s": {"command": "srv", "args": ["${env:DIR}"], "env": {"K": "${env:TOKEN}"}}}}`,
			Server{Command: "srv", Args: []string{"/srv"}, Env: map[string]string{"K": "t0k"}}, ""},
		{"vscode input", "mcp.json", `{"servers": {"s": {"command": "srv", "env": {"K": "${input:key}"}}}}`, Server{}, "${input:key}: VS Code asks"},
		{"opencode", "opencode.json", `{"mcp": {"s": {"type": "local", "command": ["srv", "{env:DIR}"], "environment": {"K": "{env:TOKEN}"}}}}`,
			Server{Command: "srv", Args: []string{"/srv"}, Env: map[string]string{"K": "t0k"}}, ""},
		{"opencode file", "opencode.json", `{"mcp": {"s": {"type": "local", "command": ["srv"], "environment": {"K": "{file:~/.key}"}}}}`, Server{}, "{file:~/.key} is not supported"},
		{"codex env_vars", "config.toml", "[mcp_servers.s]\ncommand = \"srv\"\nenv_vars = [\"TOKEN\", \"MISSING\"]\nenv = { K = \"${TOKEN}\" }\n",
			Server{Command: "srv", Env: map[string]string{"K": "${TOKEN}", "TOKEN": "t0k"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.file, []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Expand(lookup)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := c.Servers[0]
			if tt.want.Command != "" && s.Command != tt.want.Command {
				t.Errorf("command %q, want %q", s.Command, tt.want.Command)
			}
			if len(tt.want.Args) > 0 && (len(s.Args) == 0 || s.Args[0] != tt.want.Args[0]) {
				t.Errorf("args %q, want %q", s.Args, tt.want.Args)
			}
			for k, v := range tt.want.Env {
				if s.Env[k] != v {
					t.Errorf("env %s = %q, want %q", k, s.Env[k], v)
				}
			}
			for k, v := range tt.want.Headers {
				if s.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, s.Headers[k], v)
				}
			}
			if _, ok := s.Env["MISSING"]; ok {
				t.Errorf("an unset env_vars entry was set: %v", s.Env)
			}
		})
	}
}

// fuzzFiles are the file names FuzzParse reads its data as (the extension
// decides between TOML and JSON).
func fuzzFiles() []string { return []string{".mcp.json", "config.toml", "opencode.json", "mcp.json"} }

// FuzzParse reads agents' MCP configuration files as sodactl run
// --mcp-config does. A refusal names the file. What is accepted is one of
// the four formats, its servers sorted by name, each name one the agents
// take, each either a stdio command or an http(s) URL with a host. The
// file rewritten for the sandboxes (a server turned into an HTTP entry,
// another dropped) reads back as the same servers but those two.
// Expanding variables never fails but for a server it names.
func FuzzParse(f *testing.F) {
	for _, tt := range formats {
		f.Add(uint8(slices.Index(fuzzFiles(), tt.file)), []byte(tt.data))
	}
	for _, tt := range parseHostileCases() {
		toml := uint8(0)
		if strings.HasSuffix(tt.file, ".toml") {
			toml = 1
		}
		f.Add(toml, []byte(tt.data))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		file := fuzzFiles()[int(which)%len(fuzzFiles())]
		c, err := Parse(file, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), file+": ") {
				t.Fatalf("Parse(%q): %v (does not name the file)", data, err)
			}
			return
		}
		if (c.Format == FormatCodex) != strings.HasSuffix(file, ".toml") || !slices.Contains([]string{FormatClaude, FormatCodex, FormatOpenCode, FormatVSCode}, c.Format) {
			t.Fatalf("Parse(%q): format %q", data, c.Format)
		}
		for i, s := range c.Servers {
			if i > 0 && c.Servers[i-1].Name >= s.Name || checkName(s.Name) != nil {
				t.Fatalf("Parse(%q): servers %+v", data, c.Servers)
			}
			switch s.Transport {
			case "stdio":
				if s.Command == "" || s.URL != "" {
					t.Fatalf("Parse(%q): stdio server %+v", data, s)
				}
			case "http", "sse":
				if _, err := s.HostPort(); s.Command != "" || checkURL(s.URL) != nil || err != nil {
					t.Fatalf("Parse(%q): remote server %+v (%v)", data, s, err)
				}
			default:
				t.Fatalf("Parse(%q): server %+v", data, s)
			}
		}
		checkRewrite(t, file, data, c)
		if err := c.Expand(func(name string) (string, bool) { return "v", name == "TOKEN" }); err != nil && !strings.HasPrefix(err.Error(), "server ") {
			t.Fatalf("Expand of %q: %v (does not name the server)", data, err)
		}
	})
}

// checkRewrite rewrites file (data, read as c) with its first server
// made an HTTP entry and its last one dropped, and checks that the
// result reads as c with those changes.
func checkRewrite(t *testing.T, file string, data []byte, c *Config) {
	t.Helper()
	if len(c.Servers) == 0 {
		return
	}
	ep := Endpoint{URL: "http://127.0.0.1:4242/mcp", Token: "tok"}
	http := map[string]Endpoint{c.Servers[0].Name: ep}
	want := []Server{{Name: c.Servers[0].Name, URL: ep.URL, Transport: "http", Headers: map[string]string{"Authorization": "Bearer tok"}}}
	var drop []string
	if n := len(c.Servers); n > 1 {
		drop = []string{c.Servers[n-1].Name}
		want = append(want, c.Servers[1:n-1]...)
	}
	out, err := Rewrite(file, data, http, drop)
	if err != nil {
		t.Fatalf("Rewrite(%q) of what Parse reads: %v", data, err)
	}
	back, err := Parse(file, out)
	if err != nil {
		t.Fatalf("Rewrite(%q) = %q, which Parse refuses: %v", data, out, err)
	}
	if back.Format != c.Format || !reflect.DeepEqual(emptyAsNil(back.Servers), emptyAsNil(want)) {
		t.Fatalf("Rewrite(%q) = %q, read as %+v; want %+v", data, out, back, want)
	}
}

// emptyAsNil is servers with empty lists and maps made nil (a rewritten
// file need not keep "args": [] apart from no args).
func emptyAsNil(servers []Server) []Server {
	out := slices.Clone(servers)
	for i := range out {
		s := &out[i]
		if len(s.Args) == 0 {
			s.Args = nil
		}
		if len(s.Env) == 0 {
			s.Env = nil
		}
		if len(s.EnvVars) == 0 {
			s.EnvVars = nil
		}
		if len(s.Headers) == 0 {
			s.Headers = nil
		}
	}
	return out
}
