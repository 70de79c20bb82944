package agentrun

import (
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/mcpgrant"
)

// EnvMCPConfig is the variable that names, inside the sandbox, the MCP
// configuration file (Claude Code's --mcp-config format), for agents and
// scripts that take one.
const EnvMCPConfig = "SODA_MCP_CONFIG"

// setup is how a command runs with its grants.
type setup struct {
	// Argv is the command line, adjusted for the agent it runs.
	Argv []string
	// Env holds the variables to add to the sandbox's trusted
	// environment (EnvMCPConfig).
	Env []string
}

// agent is what one agent needs beyond the files in its home.
type agent struct {
	// args go right after argv[0]; mcpConfig is the MCP configuration
	// file's path inside the sandbox.
	args func(mcpConfig string) []string
}

// agents are the agents that need more than their files, by the base name
// of argv[0]; any other command runs unchanged.
var agents = map[string]agent{
	// Claude Code reads ~/.claude.json too, but only --mcp-config makes
	// a session load the servers without asking (one word: see
	// clientconfig.ClaudeMCPConfigArg).
	"claude": {args: func(p string) []string { return []string{clientconfig.ClaudeMCPConfigArg(p)} }},
}

// writeAgents writes the agents' MCP configuration for grants into home, a host
// directory that the sandbox mounts as sandboxHome, and returns argv
// adjusted for the agent it runs with the variables naming the file. With
// no grants nothing is written and argv runs unchanged. Nothing written
// can leave home, whatever home holds (the writes go through an os.Root).
func writeAgents(home, sandboxHome string, argv []string, grants []mcpgrant.Grant) (setup, error) {
	if len(grants) == 0 {
		return setup{Argv: argv}, nil
	}
	files, err := clientconfig.AgentFiles(mcpgrant.Entries(grants))
	if err != nil {
		return setup{}, err
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return setup{}, err
	}
	defer root.Close()
	for _, f := range files {
		if err := root.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return setup{}, err
		}
		if err := root.WriteFile(f.Path, f.Data, 0o600); err != nil {
			return setup{}, err
		}
	}
	mcpConfig := path.Join(sandboxHome, clientconfig.MCPConfigPath)
	return setup{Argv: agentArgv(argv, mcpConfig), Env: []string{EnvMCPConfig + "=" + mcpConfig}}, nil
}

// agentArgv is the command line of an agent granted MCP servers: what the
// agents table says goes right after argv[0], the user's arguments after
// it in order.
func agentArgv(argv []string, mcpConfig string) []string {
	if len(argv) == 0 {
		return argv
	}
	a, ok := agents[filepath.Base(argv[0])]
	if !ok {
		return argv
	}
	return slices.Concat(argv[:1], a.args(mcpConfig), argv[1:])
}
