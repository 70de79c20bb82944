//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bufio"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// TestSyscallNumbers checks the table (numbers from x/sys/unix) against
// go-seccomp-bpf's table, generated independently from the kernel sources
// of a recent release.
func TestSyscallNumbers(t *testing.T) {
	ours, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := arch.GetInfo(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if uint32(theirs.ID) != ours.auditArch {
		t.Errorf("audit arch %#x, go-seccomp-bpf says %#x", ours.auditArch, uint32(theirs.ID))
	}
	for name, nr := range ours.nums {
		t.Run(name, func(t *testing.T) {
			want, ok := theirs.SyscallNames[name]
			if !ok {
				t.Skipf("go-seccomp-bpf v1.6.0 does not know %s (newer than its table)", name)
			}
			if int(nr) != want {
				t.Errorf("%s = %d, go-seccomp-bpf says %d", name, nr, want)
			}
		})
	}
	for _, name := range ours.absent {
		if nr, ok := theirs.SyscallNames[name]; ok {
			t.Errorf("%s is listed absent but has number %d on %s", name, nr, ours.name)
		}
	}
}

// TestSyscallNumbersHeader checks the table against the installed kernel
// headers (linux-libc-dev). Syscalls newer than the headers are reported,
// not failed.
func TestSyscallNumbersHeader(t *testing.T) {
	headers := map[string]string{
		"amd64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
		"arm64": "/usr/include/aarch64-linux-gnu/asm/unistd.h",
	}
	path := headers[runtime.GOARCH]
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skipf("%s not installed (apt-get install linux-libc-dev); TestSyscallNumbers still cross-checks", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	define := regexp.MustCompile(`^#define\s+__NR_(\w+)\s+(\d+)\s*$`)
	header := map[string]uint32{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := define.FindStringSubmatch(sc.Text()); m != nil {
			n, err := strconv.ParseUint(m[2], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			header[m[1]] = uint32(n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(header) < 200 {
		t.Fatalf("%s: only %d syscall numbers parsed", path, len(header))
	}

	ours, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	for name, nr := range ours.nums {
		want, ok := header[name]
		if !ok {
			t.Logf("%s (%d) is newer than %s", name, nr, path)
			continue
		}
		if nr != want {
			t.Errorf("%s = %d, %s says %d", name, nr, path, want)
		}
	}
}
