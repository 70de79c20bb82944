//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sbxprobe: the probes of a soda sandbox need Linux")
	os.Exit(2)
}
