// Command soda-sandbox-init is the PID 1 of every soda sandbox, executed by
// the program that starts the sandbox (sodactl, sodad) through
// internal/sandbox; see internal/sandboxinit. It is installed as
// /usr/libexec/soda/soda-sandbox-init and is not for direct use.
package main

import (
	"fmt"
	"os"

	"github.com/soda-project/soda/internal/sandboxinit"
)

func main() {
	if sandboxinit.IsInit() {
		sandboxinit.Main()
	}
	fmt.Fprintln(os.Stderr, "this is soda's sandbox init, started by sodactl/sodad; not for direct use")
	os.Exit(2)
}
