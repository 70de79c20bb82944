//go:build !amd64

package main

// haveInt80 is false: int 0x80 is an x86 instruction.
const haveInt80 = false

// int80 is not available on this architecture.
func int80(uintptr) uintptr { panic("int 0x80 needs amd64") }
