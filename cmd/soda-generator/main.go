// Command soda-generator is a systemd generator (systemd.generator(7)): at
// boot and on daemon-reload it turns /etc/soda/mcp/NAME.conf into the listen
// drop-in and enablement of soda-mcp@NAME.socket, and gives
// soda-sandbox.slice the sandboxes' collective CPU quota from the host's
// CPU count; installed as a user generator as well, it gives each user's
// soda-sandbox.slice the same (and writes nothing else). Problems go to
// the kernel log and never fail the boot. See soda-generator(8).
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/soda-project/soda/internal/generator"
	"github.com/soda-project/soda/internal/serverconf"
)

func main() {
	confDir := os.Getenv("SODA_CONFIG_DIR") // for tests
	if confDir == "" {
		confDir = serverconf.DefaultDir
	}
	validateDir := os.Getenv("SODA_VALIDATE_DIR") // for tests
	if validateDir == "" {
		validateDir = "/etc/soda/validate"
	}
	etcDir := os.Getenv("SODA_SYSTEMD_ETC_DIR") // for tests
	if etcDir == "" {
		etcDir = "/etc/systemd"
	}
	os.Exit(generator.Command{
		ConfigDir:    confDir,
		ValidateDir:  validateDir,
		TemplateUnit: "/usr/lib/systemd/system/soda-mcp@.socket",
		NumCPU:       runtime.NumCPU(),
		User:         generator.UserManager(os.Getenv("SYSTEMD_SCOPE"), os.Args[0]),
		EtcDir:       etcDir,
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
		Log:          kmsgLogger(),
	}.Run(os.Args[1:]))
}

// kmsgLogger logs to /dev/kmsg (generators run before journald), falling
// back to stderr.
func kmsgLogger() generator.Logger {
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if err == nil {
			if _, werr := fmt.Fprintf(f, "<4>soda-generator: %s\n", msg); werr == nil {
				return
			}
		}
		fmt.Fprintf(os.Stderr, "soda-generator: %s\n", msg)
	}
}
