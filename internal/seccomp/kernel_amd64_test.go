//go:build linux

package seccomp

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// x32GetPid is getpid through the x32 ABI (__X32_SYSCALL_BIT | 39).
const x32GetPid = x32SyscallBit | unix.SYS_GETPID

// archProbes are the x86_64-only probes.
func archProbes() map[string]func() error {
	return map[string]func() error{
		"modify_ldt":    func() error { return ignoreResult(sys(unix.SYS_MODIFY_LDT, 0, 0, 0)) },
		"iopl":          func() error { return ignoreResult(sys(unix.SYS_IOPL, 0)) },
		"ioperm":        func() error { return ignoreResult(sys(unix.SYS_IOPERM, 0, 0, 0)) },
		"sysfs":         func() error { return ignoreResult(sys(unix.SYS_SYSFS, 3)) },
		"ustat":         func() error { return ignoreResult(sys(unix.SYS_USTAT, 0, 0)) },
		"uselib":        func() error { return ignoreResult(sys(unix.SYS_USELIB, 0)) },
		"_sysctl":       func() error { return ignoreResult(sys(unix.SYS__SYSCTL, 0)) },
		"create_module": func() error { return ignoreResult(sys(unix.SYS_CREATE_MODULE, 0, 0)) },
		"x32_getpid":    func() error { return ignoreResult(sys(x32GetPid)) },
	}
}

// archProbeCases are the x86_64-only expectations (x32_getpid has its own
// test: it kills the process).
func archProbeCases() []probeCase {
	return []probeCase{
		{probe: "modify_ldt", want: []string{"EPERM"}},
		{probe: "iopl", want: []string{"EPERM"}},
		{probe: "ioperm", want: []string{"EPERM"}},
		{probe: "sysfs", want: []string{"EPERM"}, control: []string{"OK"}},
		{probe: "ustat", want: []string{"EPERM"}},
		{probe: "uselib", want: []string{"EPERM"}},
		{probe: "_sysctl", want: []string{"EPERM"}, control: []string{"ENOSYS"}},
		{probe: "create_module", want: []string{"EPERM"}, control: []string{"ENOSYS"}},
	}
}

func TestX32Killed(t *testing.T) {
	r := runChild(t, "x32_getpid", Options{}, true, "")
	if !killedBySIGSYS(r.state) {
		t.Fatalf("x32 getpid under the filter: %v, result %q; want death by SIGSYS", r.state, r.result())
	}
	c := runChild(t, "x32_getpid", Options{}, false, "")
	t.Logf("without the filter the kernel answers %q (%v)", c.result(), c.state)
}

// int80 calls getpid (i386 number 20) through the 32-bit int $0x80 gate
// from a 64-bit program.
const int80 = `#include <stdio.h>
int main(void) {
	long ret;
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
	printf("int80 getpid=%ld\n", ret);
	return 0;
}
`

func TestI386SyscallKilled(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("gcc not found in PATH (%v): install gcc to run the int $0x80 probe", err)
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "int80.c"), filepath.Join(dir, "int80")
	if err := os.WriteFile(src, []byte(int80), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-O0", "-o", bin, src)
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	r := runChild(t, probeExec, Options{}, true, dir, bin)
	if !killedBySIGSYS(r.state) {
		t.Fatalf("int $0x80 under the filter: %v, stdout %q; want death by SIGSYS", r.state, r.stdout)
	}
	c := runChild(t, probeExec, Options{}, false, dir, bin)
	t.Logf("without the filter: %v, stdout %q", c.state, c.stdout)
}
