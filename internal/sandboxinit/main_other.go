//go:build !linux

package sandboxinit

import (
	"fmt"
	"os"
)

// IsInit reports whether this process was started as a sandbox's init;
// never on this system, where there are no sandboxes.
func IsInit() bool { return false }

// Main runs the sandbox role of this process; on this system it says that
// sandboxes need Linux and exits.
func Main() {
	fmt.Fprintln(os.Stderr, "soda-sandbox-init: sandboxes need Linux")
	os.Exit(2)
}
