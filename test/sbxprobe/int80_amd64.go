package main

// haveInt80 is true where int80 is implemented.
const haveInt80 = true

// int80 makes an i386 system call with number trap through "int $0x80" and
// returns the raw result (a negative errno on failure). A seccomp filter that
// kills foreign-architecture calls ends the process with SIGSYS.
func int80(trap uintptr) uintptr
