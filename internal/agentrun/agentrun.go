// Package agentrun is the one recipe for running a coding agent in a
// sandbox, shared by `sodactl run` (which builds the sandbox itself) and
// sodad (which builds it for a caller, from a profile). From explicit
// inputs (the sandbox as the caller's policy has it, and the MCP servers
// granted to the agent) Build makes the engine's sandbox.Spec: the
// servers' loopback ports relayed into the sandbox, a private home with
// the MCP configuration of Claude Code, Codex and OpenCode in it (tokens
// included: clientconfig.AgentFiles), and the command line adjusted for
// the agent that runs (Claude Code: --mcp-config=FILE, from a table keyed
// by agent).
//
// The callers gather the inputs (flags and --mcp-config for sodactl; a
// profile, a D-Bus request and its fds for sodad) and own what Build
// returns: they start the spec and remove the home once the sandbox has
// ended.
package agentrun

import (
	"fmt"
	"slices"

	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/workhome"
)

// Recipe is everything a run of an agent is made of.
type Recipe struct {
	// Sandbox is the sandbox as the caller's policy has it: the command
	// (none for a persistent sandbox), its paths, masks, environment,
	// limits, egress allow-list and streams. Build adds the servers and
	// the home to a copy of it.
	Sandbox sandbox.Spec
	// Servers are the MCP servers granted to the agent, in the order the
	// agents' files list them: soda-mcp@ servers (mcpgrant.Resolver) and
	// the run's own. A server with a Port is on that port of the host's
	// loopback, relayed into the sandbox; one without is reached as its
	// entry says (a remote URL through the proxy, or a command the agent
	// starts inside).
	Servers []mcpgrant.Grant
}

// ConflictError is a recipe whose servers claim one name twice, one
// loopback port twice, or the port of the sandbox's proxy.
type ConflictError struct {
	Server string // the server that came second
	Reason string // what it clashes with
}

// Error names the server and the clash.
func (e *ConflictError) Error() string { return "MCP server " + e.Server + ": " + e.Reason }

// Check reports the first server of servers that clashes with the
// sandbox's proxy or with one before it (a *ConflictError).
func Check(servers []mcpgrant.Grant) error {
	names := make(map[string]bool, len(servers))
	ports := make(map[uint16]string, len(servers))
	for _, g := range servers {
		name := g.Entry.Name
		if names[name] {
			return &ConflictError{Server: name, Reason: "another granted server has that name"}
		}
		names[name] = true
		if g.Port == 0 {
			continue
		}
		if g.Port == sandbox.DefaultProxyPort {
			return &ConflictError{Server: name, Reason: fmt.Sprintf("port %d is the sandbox proxy's", g.Port)}
		}
		if other, ok := ports[g.Port]; ok {
			return &ConflictError{Server: name, Reason: fmt.Sprintf("port %d is granted server %s's too", g.Port, other)}
		}
		ports[g.Port] = name
	}
	return nil
}

// Build makes r's sandbox spec with a new private home from homes, the
// agents' files written in it. The caller owns the home: it removes it
// once the sandbox has ended; when Build fails it has removed it itself.
func Build(homes *workhome.Dir, r Recipe) (sandbox.Spec, *workhome.Home, error) {
	if err := Check(r.Servers); err != nil {
		return sandbox.Spec{}, nil, err
	}
	spec := r.Sandbox
	spec.Egress.MCPPorts = slices.Clone(spec.Egress.MCPPorts)
	for _, g := range r.Servers {
		if g.Port != 0 {
			spec.Egress.MCPPorts = append(spec.Egress.MCPPorts, g.Port)
		}
	}
	h, err := homes.New()
	if err != nil {
		return sandbox.Spec{}, nil, fmt.Errorf("sandbox home: %w", err)
	}
	agent, err := writeAgents(h.Path(), sandbox.SandboxHome, spec.Argv, r.Servers)
	if err != nil {
		_ = h.Remove()
		return sandbox.Spec{}, nil, fmt.Errorf("write the agents' MCP configuration: %w", err)
	}
	spec.Home = h.Path()
	spec.TrustedEnv = slices.Concat(spec.TrustedEnv, agent.Env)
	if !spec.Persistent {
		spec.Argv = agent.Argv
	}
	return spec, h, nil
}
