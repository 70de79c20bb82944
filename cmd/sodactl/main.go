// Command sodactl is soda's command-line front for operators and users: it
// prints MCP bearer tokens and client configuration snippets. See sodactl(1).
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
