// Command soda-generator is a systemd generator (systemd.generator(7)): at
// boot and on daemon-reload it turns /etc/soda/mcp/NAME.conf into the listen
// drop-in and enablement of soda-mcp@NAME.socket. Problems go to the kernel
// log and never fail the boot.
package main

import (
	"fmt"
	"os"

	"github.com/soda-project/soda/internal/generator"
)

func main() {
	logf := kmsgLogger()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: soda-generator NORMAL-DIR [EARLY-DIR LATE-DIR]")
		os.Exit(2)
	}
	confDir := os.Getenv("SODA_CONFIG_DIR") // for tests
	if confDir == "" {
		confDir = "/etc/soda/mcp"
	}
	_, err := generator.Generate(generator.Options{
		ConfigDir:    confDir,
		OutputDir:    os.Args[1],
		TemplateUnit: "/usr/lib/systemd/system/soda-mcp@.socket",
	}, logf)
	if err != nil {
		logf("%v", err)
	}
	// A generator's failure must not break boot: always exit 0.
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
