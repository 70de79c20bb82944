// Command soda-validated is a validation worker: one operator-fixed
// validator (/etc/soda/validate/KIND.conf) as an MCP tool, run in a
// closed-network sandbox, one call at a time (soda-validated(8)).
package main

import (
	"os"

	"github.com/soda-project/soda/internal/validated"
)

func main() { os.Exit(validated.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
