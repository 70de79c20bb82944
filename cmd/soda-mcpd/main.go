// Command soda-mcpd puts a stdio MCP server on an authenticated loopback MCP
// endpoint, one child process per client session. See soda-mcpd(8).
package main

import (
	"context"
	"os"

	"github.com/soda-project/soda/internal/mcpd"
)

func main() {
	os.Exit(mcpd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
