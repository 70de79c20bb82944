// Package version holds the version of soda's commands, set at build time:
//
//	go build -ldflags "-X github.com/soda-project/soda/internal/version.Version=1.2.3"
//
// It is a package of its own so that every command can print its version
// without importing the daemon.
package version

// Version is the version of this build; "dev" when not set by the linker.
var Version = "dev"
