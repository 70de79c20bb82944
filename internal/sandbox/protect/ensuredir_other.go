//go:build !linux

package protect

import "os"

// EnsureDir does nothing on this system: protected paths are made only by
// the Linux sandbox engine.
func EnsureDir(hostRoot, p string, mode os.FileMode) {}
