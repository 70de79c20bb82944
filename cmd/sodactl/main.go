// Command sodactl is soda's command-line front for operators and users: it
// runs agents in a sandbox (sodactl run), lists soda's MCP bridges and
// their status, and prints their bearer tokens and client configuration
// snippets. See sodactl(1).
package main

import (
	"os"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/sandbox"
)

func main() {
	// sodactl re-executes itself as a sandbox's init and stage, and as the
	// gate that holds a process until it sits in its systemd scope.
	if child.IsGate() {
		child.RunGate()
	}
	if sandbox.IsInit() {
		sandbox.Main()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
