// Command soda-mcpd puts a stdio MCP server on an authenticated loopback MCP
// endpoint, one child process per client session. See soda-mcpd(8).
package main

import (
	"context"
	"os"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/mcpd"
)

func main() {
	// soda-mcpd re-executes itself as the gate that holds a child until it
	// sits in its transient scope; see internal/child.
	if child.IsGate() {
		child.RunGate()
	}
	os.Exit(mcpd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
