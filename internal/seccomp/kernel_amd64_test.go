//go:build linux

package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	r := runChild(t, "x32_getpid", true, "")
	if !killedBySIGSYS(r.state) {
		t.Fatalf("x32 getpid under the filter: %v, result %q; want death by SIGSYS", r.state, r.result())
	}
	c := runChild(t, "x32_getpid", false, "")
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

	// The control first: some hosts cannot make 32-bit system calls at
	// all (a kernel without IA32 emulation, or booted with
	// ia32_emulation=0), and there int $0x80 faults with no filter in
	// place, so a death under the filter would prove nothing.
	c := runChild(t, probeExec, false, dir, bin)
	if skip, err := int80Control(c.state, c.stdout); err != nil {
		t.Fatal(err)
	} else if skip != "" {
		t.Skip(skip)
	}
	r := runChild(t, probeExec, true, dir, bin)
	if !killedBySIGSYS(r.state) {
		t.Fatalf("int $0x80 under the filter: %v, stdout %q; want death by SIGSYS", r.state, r.stdout)
	}
}

// int80Control judges the unfiltered run of the int $0x80 probe: a reason
// to skip when the host cannot run 32-bit system calls at all, an error
// when the control is inconclusive, neither when the call ran.
func int80Control(state *os.ProcessState, stdout string) (skip string, err error) {
	ws, _ := state.Sys().(syscall.WaitStatus)
	return int80Verdict(ws, stdout)
}

func int80Verdict(ws syscall.WaitStatus, stdout string) (skip string, err error) {
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGSEGV:
		return fmt.Sprintf("host lacks: this host cannot run 32-bit system calls: int $0x80 without any filter died by %v "+
			"(kernel without IA32 emulation, or ia32_emulation=0), so the filter's kill cannot be observed", ws.Signal()), nil
	case ws.Exited() && ws.ExitStatus() == 0 && strings.HasPrefix(stdout, "int80 getpid="):
		return "", nil
	}
	return "", fmt.Errorf("int $0x80 control (no filter) is inconclusive: wait status %#x, stdout %q", uint32(ws), stdout)
}

func TestInt80Verdict(t *testing.T) {
	// Wait statuses as the kernel encodes them: exit code << 8, or the
	// terminating signal in the low bits.
	exited := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	signaled := func(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }
	for _, tc := range []struct {
		name     string
		ws       syscall.WaitStatus
		stdout   string
		wantSkip bool
		wantErr  bool
	}{
		{"call ran", exited(0), "int80 getpid=4242\n", false, false},
		{"no ia32 emulation", signaled(syscall.SIGSEGV), "", true, false},
		{"killed otherwise", signaled(syscall.SIGKILL), "", false, true},
		{"failed without output", exited(1), "", false, true},
		{"exit 0, no report", exited(0), "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skip, err := int80Verdict(tc.ws, tc.stdout)
			if (skip != "") != tc.wantSkip || (err != nil) != tc.wantErr {
				t.Fatalf("int80Verdict(%#x, %q) = %q, %v; want skip %v, error %v", uint32(tc.ws), tc.stdout, skip, err, tc.wantSkip, tc.wantErr)
			}
		})
	}
}
