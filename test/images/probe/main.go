// Command probe is the one program of the test image of
// test/images (and internal/sandbox TestRootFS): it says what the
// sandbox's root holds.
package main

import (
	"fmt"
	"os"
)

func main() {
	b, err := os.ReadFile("/etc/os-release")
	fmt.Printf("os-release: %q %v\n", b, err)
	for _, p := range []string{"/usr/bin/env", "/bin/sh", "/usr/lib/os-release"} {
		_, err := os.Stat(p)
		fmt.Printf("stat %s: %v\n", p, err == nil)
	}
	err = os.WriteFile("/bin/written", []byte("x"), 0o644)
	fmt.Printf("write /bin/written: %v\n", err == nil)
	err = os.WriteFile(os.Getenv("HOME")+"/ok", []byte("x"), 0o644)
	fmt.Printf("write home: %v\n", err == nil)
}
