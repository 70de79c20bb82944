package sandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// agentsDir installs test/sandbox/agents (the real Codex and OpenCode
// CLIs and server-filesystem, pinned in its package-lock.json) and
// returns its directory. npm install, not npm ci: the lock file lacks the
// other platforms' optional opencode packages, which npm ci then asks for.
func (e *env) agentsDir(t *testing.T) string {
	t.Helper()
	return e.npmPackage(t, "agents", "install")
}

// holdScript opens one MCP session to each server of Claude's file that
// sodactl run wrote (SODA_MCP_CONFIG) and keeps them open: the bridges
// then have a child each.
const holdScript = `
const cfg = JSON.parse(require('fs').readFileSync(process.env.SODA_MCP_CONFIG, 'utf8'));
(async () => {
  for (const [name, s] of Object.entries(cfg.mcpServers)) {
    const r = await fetch(s.url, {method: 'POST', headers: {...s.headers, 'content-type': 'application/json', accept: 'application/json, text/event-stream'},
      body: JSON.stringify({jsonrpc: '2.0', id: 1, method: 'initialize', params: {protocolVersion: '2025-06-18', capabilities: {}, clientInfo: {name: 'hold', version: '1'}}})});
    console.log(name, r.status, r.headers.get('mcp-session-id') ? 'session' : 'none');
  }
  console.log('held');
  setInterval(() => {}, 1000);
})();
`

// codexProbe answers, for each server of the Codex configuration the
// sandbox home holds, whether its URL answers initialize with the token
// written there: codex mcp list does not connect to servers.
const codexProbe = `
const toml = require('fs').readFileSync(process.env.HOME + '/.codex/config.toml', 'utf8');
(async () => {
  for (const m of toml.matchAll(/\[mcp_servers\.([^\]]+)\]\nurl = "([^"]+)"\nhttp_headers = \{ "Authorization" = "([^"]+)" \}/g)) {
    const r = await fetch(m[2], {method: 'POST', headers: {authorization: m[3], 'content-type': 'application/json', accept: 'application/json, text/event-stream'},
      body: JSON.stringify({jsonrpc: '2.0', id: 1, method: 'initialize', params: {protocolVersion: '2025-06-18', capabilities: {}, clientInfo: {name: 'probe', version: '1'}}})});
    const body = await r.text();
    console.log('codex-config', m[1], r.status, body.includes('serverInfo') ? 'initialized' : 'no-answer');
  }
})();
`

// TestMCPConfig runs sodactl run --mcp-config with an agent's own MCP
// configuration, in Claude's, Codex's and OpenCode's formats, holding two
// stdio servers from npm (server-everything, server-filesystem) with a
// secret in one's env, and the real Claude Code, Codex and OpenCode CLIs
// inside the sandbox (issue 15):
//
//   - claude mcp list and opencode mcp list connect to both, now HTTP
//     entries on the host; codex mcp list lists them, and the URLs of
//     Codex's file answer initialize with its token;
//   - the secret is nowhere in the sandbox: environment, home, the
//     granted project (whose configuration file is masked), /tmp, /run,
//     /etc, any process's environment or command line;
//   - the servers and their children are gone when the run ends.
func TestMCPConfig(t *testing.T) {
	e := requireEnv(t)
	claude := e.claudeCLI(t)
	ccDir := filepath.Dir(filepath.Dir(filepath.Dir(claude)))
	agents := e.agentsDir(t)
	codex, opencode := filepath.Join(agents, "node_modules/.bin/codex"), filepath.Join(agents, "node_modules/.bin/opencode")
	everything := filepath.Join(e.repo, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	fsServer := filepath.Join(agents, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	if r := e.exec(execOpts{}, codex, "--version"); r.err != nil || !strings.Contains(r.stdout, "codex") {
		t.Fatalf("control: codex does not run in the box: %s", r)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	secret := "sodakey" + hex.EncodeToString(b)

	ws := e.bin + "/ws-mcpconfig"
	configs := []struct {
		format, file, data string
	}{
		{"claude", ".mcp.json", fmt.Sprintf(`{"mcpServers": {
  "everything": {"command": "node", "args": [%q, "stdio"], "env": {"API_KEY": %q}},
  "files": {"command": "node", "args": [%q, %q]}
}}`, everything, secret, fsServer, ws)},
		{"codex", "config.toml", fmt.Sprintf(`model = "gpt-5"
[mcp_servers.everything]
command = "node"
args = [%q, "stdio"]
env = { API_KEY = %q }

[mcp_servers.files]
command = "node"
args = [%q, %q]
`, everything, secret, fsServer, ws)},
		{"opencode", "opencode.json", fmt.Sprintf(`{
  "$schema": "https://opencode.ai/config.json",
  // the user's own servers
  "mcp": {
    "everything": {"type": "local", "command": ["node", %q, "stdio"], "environment": {"API_KEY": %q}, "enabled": true},
    "files": {"type": "local", "command": ["node", %q, %q]},
  },
}`, everything, secret, fsServer, ws)},
	}
	// Each step prints a marker first. The secret is searched for with a
	// pattern that does not match itself (sodakey[x]...), so that the
	// searching command lines do not count.
	script := fmt.Sprintf(`S='%s'
echo '=== claude'; %s mcp list
echo '=== codex'; %s mcp list; node -e "$CODEX_PROBE"
echo '=== opencode'; %s mcp list
echo '=== secret'
env | grep -c "$S"
grep -rls "$S" "$HOME" %s /tmp /run /etc /var 2>/dev/null
for p in /proc/[0-9]*; do grep -ls "$S" $p/environ $p/cmdline 2>/dev/null; done
echo '=== end'`, selfless(secret), claude, codex, opencode, ws)
	for _, c := range configs {
		t.Run(c.format, func(t *testing.T) {
			if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s", ws)); r.err != nil {
				t.Fatal(r)
			}
			file := filepath.Join(ws, c.file)
			if err := os.WriteFile(file, []byte(c.data), 0o600); err != nil {
				t.Fatal(err)
			}
			r := e.sodactl(execOpts{timeout: 4 * time.Minute, env: []string{"CODEX_PROBE=" + codexProbe}},
				"--mcp-config", file, "--rw", ws, "--ro", ccDir, "--ro", agents, "--env", "CODEX_PROBE", "--", "sh", "-c", script)
			if r.err != nil {
				t.Fatalf("sodactl run --mcp-config: %s", r)
			}
			for _, want := range []string{"sodactl: MCP server everything: on the host, http://127.0.0.1:", "sodactl: MCP server files: on the host, http://127.0.0.1:"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q: %s", want, r)
				}
			}
			part := func(name string) string {
				_, rest, _ := strings.Cut(r.stdout, "=== "+name+"\n")
				before, _, _ := strings.Cut(rest, "\n=== ")
				return before
			}
			for _, srv := range []string{"everything", "files"} {
				if !regexpMatch(`(?m)^`+srv+`: http://127\.0\.0\.1:\d+/mcp \(HTTP\) - ✔ Connected$`, part("claude")) {
					t.Errorf("claude mcp list: %s not connected:\n%s", srv, part("claude"))
				}
				if !regexpMatch(`(?m)^`+srv+` +http://127\.0\.0\.1:\d+/mcp .* enabled +Bearer token`, part("codex")) ||
					!regexpMatch(`(?m)^codex-config `+srv+` 200 initialized$`, part("codex")) {
					t.Errorf("codex: %s not listed, or its URL does not answer initialize:\n%s", srv, part("codex"))
				}
				if !regexpMatch(`✓ `+srv+`\S* *(\x1b\[\d+m)?connected`, part("opencode")) {
					t.Errorf("opencode mcp list: %s not connected:\n%s", srv, part("opencode"))
				}
			}
			if s := strings.TrimSpace(part("secret")); s != "0" {
				t.Errorf("the secret is findable in the sandbox (want a 0 count and no file):\n%s", s)
			}
			if !strings.Contains(r.stdout, "=== end") {
				t.Errorf("the script did not finish: %s", r)
			}
			e.noPerRunLeft(t, ws)
			e.noLeftovers(t)
		})
	}
}

// TestMCPConfigLifecycle: a server that fails its health check stops the
// run, before COMMAND, with its name and stderr tail, unless it is
// --mcp-optional; --mcp-inside runs a server inside the sandbox, and the
// log says so; kill -9 of sodactl while sessions are open leaves no
// server, child or sandbox (and the next run removes the private home).
func TestMCPConfigLifecycle(t *testing.T) {
	e := requireEnv(t)
	claude := e.claudeCLI(t)
	ccDir := filepath.Dir(filepath.Dir(filepath.Dir(claude)))
	agents := e.agentsDir(t)
	everything := filepath.Join(e.repo, "test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	fsServer := filepath.Join(agents, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	ws := e.bin + "/ws-mcplife"
	if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s", ws)); r.err != nil {
		t.Fatal(r)
	}
	file := filepath.Join(ws, ".mcp.json")
	conf := fmt.Sprintf(`{"mcpServers": {
  "everything": {"command": "node", "args": [%q, "stdio"]},
  "files": {"command": "node", "args": [%q, %q]},
  "broken": {"command": "sh", "args": ["-c", "echo 'broken: cannot reach the database' >&2; exit 3"]}
}}`, everything, fsServer, ws)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "hold.js"), []byte(holdScript), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("failing server, checked before", func(t *testing.T) {
		r := e.sodactl(execOpts{timeout: 2 * time.Minute}, "--mcp-check", "before", "--mcp-config", file, "--rw", ws, "--", "touch", ws+"/ran")
		if r.code != 125 || !strings.Contains(r.stderr, "MCP server broken failed its health check") || !strings.Contains(r.stderr, "broken: cannot reach the database") {
			t.Errorf("want exit 125 naming the server and quoting its stderr: %s", r)
		}
		if e.exec(execOpts{}, "test", "-e", ws+"/ran").err == nil {
			t.Errorf("COMMAND ran although a required server failed")
		}
		e.noPerRunLeft(t, ws)
	})

	// The default: checked by first use. The broken server's child dies
	// while the sandbox starts, and the run is stopped, its command
	// (which would wait 60 s) with it.
	t.Run("failing server, checked by first use", func(t *testing.T) {
		start := time.Now()
		r := e.sodactl(execOpts{timeout: 2 * time.Minute}, "--mcp-config", file, "--rw", ws, "--", "sleep", "60")
		if r.code != 125 || !strings.Contains(r.stderr, "MCP server broken failed its health check") || !strings.Contains(r.stderr, "broken: cannot reach the database") ||
			!strings.Contains(r.stderr, "stopping the run") {
			t.Errorf("want exit 125 naming the server, quoting its stderr, saying the run stopped: %s", r)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the run took %s: the command was not stopped", d)
		}
		e.noPerRunLeft(t, ws)
	})

	t.Run("optional and inside", func(t *testing.T) {
		r := e.sodactl(execOpts{timeout: 2 * time.Minute}, "--mcp-config", file, "--mcp-optional", "broken", "--mcp-inside", "files",
			"--rw", ws, "--ro", ccDir, "--ro", agents, "--", claude, "mcp", "list")
		if r.err != nil {
			t.Fatalf("sodactl run: %s", r)
		}
		for _, want := range []string{"MCP server broken: skipped (--mcp-optional)", "broken: cannot reach the database",
			"MCP server files: inside the sandbox (--mcp-inside)", "MCP server everything: on the host"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q: %s", want, r)
			}
		}
		if !regexpMatch(`(?m)^everything: http://127\.0\.0\.1:\d+/mcp \(HTTP\) - ✔ Connected$`, r.stdout) ||
			!regexpMatch(`(?m)^files: node \S+server-filesystem\S+ `+ws+` - ✔ Connected$`, r.stdout) || strings.Contains(r.stdout, "broken") {
			t.Errorf("claude mcp list: want everything over HTTP, files as stdio, both connected, no broken: %s", r)
		}
		e.noPerRunLeft(t, ws)
		e.noLeftovers(t)
	})

	// The mask is bound to the file's directory entry: a file renamed
	// over it on the host (an editor's atomic save) would show through, so
	// the run stops instead.
	t.Run("replaced on the host", func(t *testing.T) {
		conf2 := filepath.Join(ws, "replaced.mcp.json")
		if err := os.WriteFile(conf2, []byte(fmt.Sprintf(`{"mcpServers": {"everything": {"command": "node", "args": [%q, "stdio"], "env": {"K": "old"}}}}`, everything)), 0o600); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf(`(sleep 2; printf '{"mcpServers": {"x": {"command": "true", "env": {"K": "replaced-s3cret"}}}}' > %[1]s.new; mv %[1]s.new %[1]s) &
%[2]s/sodactl run --mcp-config %[1]s --rw %[3]s -- sh -c 'sleep 6; cat %[1]s'; echo "exit=$?"`, conf2, e.bin, ws)
		r := e.exec(execOpts{timeout: 2 * time.Minute}, "sh", "-c", script)
		if !strings.Contains(r.stdout, "exit=125") || !strings.Contains(r.stderr, "was replaced on the host during the run") || strings.Contains(r.stdout, "replaced-s3cret") {
			t.Errorf("want the run stopped (exit 125, the reason) before the sandbox reads the new file: %s", r)
		}
		e.noPerRunLeft(t, ws)
	})

	t.Run("kill -9 of sodactl", func(t *testing.T) {
		out := ws + "/hold.out"
		start := fmt.Sprintf(`%s/sodactl run --mcp-config %s --mcp-optional broken --rw %s -- node %s/hold.js > %s 2>&1 & echo $! > %s/sodactl.pid
for i in $(seq 300); do grep -q held %s && break; sleep 0.1; done; cat %s`, e.bin, file, ws, ws, out, ws, out, out)
		r := e.exec(execOpts{timeout: 2 * time.Minute}, "sh", "-c", start)
		if r.err != nil || !strings.Contains(r.stdout, "everything 200 session") || !strings.Contains(r.stdout, "files 200 session") {
			t.Fatalf("open sessions through the per-run servers: %s", r)
		}
		// Control: the sessions have their children now.
		if n := e.exec(execOpts{}, "sh", "-c", "pgrep -fc 'server-filesystem.*"+selfless(ws)+"'").stdout; strings.TrimSpace(n) == "0" {
			t.Fatalf("control: no server-filesystem child for the open session")
		}
		if r := e.exec(execOpts{}, "sh", "-c", "kill -9 $(cat "+ws+"/sodactl.pid)"); r.err != nil {
			t.Fatal(r)
		}
		// The servers, their children and the sandbox end with sodactl;
		// the private home it left is removed by the next run.
		e.noPerRunLeft(t, ws)
		if r := e.sodactl(execOpts{}, "--", "true"); r.err != nil {
			t.Fatalf("the next run: %s", r)
		}
		e.noLeftovers(t)
	})
}

// noPerRunLeft checks, for 5 s, that no per-run server of a run in ws is
// left: no process naming ws or holding server-everything outside a
// soda-mcp@ unit, and no soda-run-* scope.
func (e *env) noPerRunLeft(t *testing.T, ws string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	check := fmt.Sprintf(`pgrep -af '%s'; systemctl list-units --all --plain --no-legend 'soda-run-*' | grep -v '^$'; `+
		`for p in $(pgrep -f 'server-everythin[g]'); do grep -q soda-mcp /proc/$p/cgroup || echo "per-run everything server: pid $p"; done; true`, selfless(ws))
	for {
		r := e.exec(execOpts{}, "sh", "-c", check)
		if strings.TrimSpace(r.stdout) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("per-run MCP servers left behind:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// selfless is a grep pattern for s that does not match itself: its last
// character in brackets (s ends in a letter, digit or one of "-_/.").
func selfless(s string) string {
	return s[:len(s)-1] + "[" + s[len(s)-1:] + "]"
}

// regexpMatch reports whether s matches the regular expression re.
func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
