// Command sodactl is soda's command-line front for operators and users: it
// runs agents in a sandbox (sodactl run), lists soda's MCP bridges and
// their status, and prints their bearer tokens and client configuration
// snippets. See sodactl(1).
package main

import (
	"os"

	"github.com/soda-project/soda/internal/child"
)

func main() {
	// sodactl re-executes itself as the gate that holds a process until
	// it sits in its systemd scope; a sandbox's init is its own binary,
	// soda-sandbox-init (sandbox.FindInit).
	if child.IsGate() {
		child.RunGate()
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
