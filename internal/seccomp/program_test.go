//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Personality flags not exported by x/sys/unix (include/uapi/linux/personality.h).
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
	perLinux32      = 0x0008
)

// seccompData mirrors struct seccomp_data.
type seccompData struct {
	NR   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

// kernelBytes is seccomp_data as the kernel hands it to the filter on a
// little-endian machine.
func (d seccompData) kernelBytes() []byte {
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, d); err != nil {
		panic(err) // fixed-size struct: cannot fail
	}
	return buf.Bytes()
}

// vmInput converts kernel bytes for x/net/bpf's VM. The kernel loads each
// 32-bit word in native (little-endian) order; the VM, written for
// packets, loads in network order. Byte-swapping every word keeps each
// word at its kernel offset while giving the VM the kernel's value, so the
// real program runs unchanged.
func vmInput(kernel []byte) []byte {
	out := make([]byte, len(kernel))
	for off := 0; off+4 <= len(kernel); off += 4 {
		binary.BigEndian.PutUint32(out[off:], binary.LittleEndian.Uint32(kernel[off:]))
	}
	return out
}

// nativeAudit is AUDIT_ARCH of the running architecture.
func nativeAudit(t *testing.T) uint32 {
	t.Helper()
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	return arch.auditArch
}

// call is a native-architecture seccomp_data for syscall nr.
func call(t *testing.T, nr uintptr, args ...uint64) seccompData {
	t.Helper()
	d := seccompData{NR: int32(nr), Arch: nativeAudit(t), IP: 0x7fff_dead_beef}
	copy(d.Args[:], args)
	return d
}

// nrOf returns the number the table gives a syscall, failing when absent.
func nrOf(t *testing.T, name string) uintptr {
	t.Helper()
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	nr, ok := arch.nums[name]
	if !ok {
		t.Fatalf("no %s on %s", name, arch.name)
	}
	return uintptr(nr)
}

// newVM loads the filter exactly as Program returns it.
func newVM(t *testing.T) *bpf.VM {
	t.Helper()
	prog, err := Program()
	if err != nil {
		t.Fatalf("Program: %v", err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("filter has instructions the VM cannot decode: %v", insns)
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	return vm
}

// verdict runs the filter on d.
func verdict(t *testing.T, vm *bpf.VM, d seccompData) uint32 {
	t.Helper()
	ret, err := vm.Run(vmInput(d.kernelBytes()))
	if err != nil {
		t.Fatalf("vm.Run: %v", err)
	}
	return uint32(ret)
}

// verdictName makes verdicts readable in failures.
func verdictName(v uint32) string {
	switch v {
	case retAllow:
		return "ALLOW"
	case retKill:
		return "KILL_PROCESS"
	case retEPERM:
		return "ERRNO(EPERM)"
	case retENOSYS:
		return "ERRNO(ENOSYS)"
	}
	return fmt.Sprintf("%#x", v)
}

func TestVMInputLayout(t *testing.T) {
	d := seccompData{NR: 0x01020304, Arch: 0xc000003e, IP: 0x1111_2222_3333_4444}
	d.Args[1] = 0x0000_0001_0000_5412
	b := vmInput(d.kernelBytes())
	tests := []struct {
		name string
		off  uint32
		want uint32
	}{
		{"nr", offNr, 0x01020304},
		{"arch", offArch, 0xc000003e},
		{"ip low", 8, 0x3333_4444},
		{"args[1] low", argLow(1), 0x5412},
		{"args[1] high", argLow(1) + 4, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := binary.BigEndian.Uint32(b[tc.off:]); got != tc.want {
				t.Errorf("word at %d = %#x, want %#x", tc.off, got, tc.want)
			}
		})
	}
}

func TestProgramRules(t *testing.T) {
	const hi = uint64(1) << 32 // set in the high word, ignored by the kernel
	x86 := runtime.GOARCH == "amd64"
	killOnX86 := func() uint32 {
		if x86 {
			return retKill
		}
		return retAllow // aarch64 has no x32 ABI; the kernel answers ENOSYS
	}()
	foreign := map[bool]uint32{true: unix.AUDIT_ARCH_AARCH64, false: unix.AUDIT_ARCH_X86_64}[x86]
	tests := []struct {
		name string
		data seccompData
		want uint32
	}{
		// 1. Architecture.
		{"i386 getpid (int 0x80)", seccompData{NR: 20, Arch: unix.AUDIT_ARCH_I386}, retKill},
		{"arm (aarch32)", seccompData{NR: 20, Arch: unix.AUDIT_ARCH_ARM}, retKill},
		{"other 64-bit arch", seccompData{NR: int32(unix.SYS_GETPID), Arch: foreign}, retKill},
		{"arch zero", seccompData{NR: int32(unix.SYS_GETPID)}, retKill},
		{"x32 getpid", call(t, x32SyscallBit|39), killOnX86},
		{"x32 read (nr 0)", call(t, x32SyscallBit), killOnX86},
		{"nr 0xffffffff", call(t, 0xffffffff), killOnX86},
		{"highest non-x32 nr", call(t, x32SyscallBit-1), retAllow},

		// Plain syscalls the tools need.
		{"read", call(t, unix.SYS_READ), retAllow},
		{"openat", call(t, unix.SYS_OPENAT), retAllow},
		{"execve", call(t, unix.SYS_EXECVE), retAllow},
		{"wait4", call(t, unix.SYS_WAIT4), retAllow},
		{"futex", call(t, unix.SYS_FUTEX), retAllow},
		{"tkill", call(t, unix.SYS_TKILL, 0xffffffff), retAllow},
		{"tgkill", call(t, unix.SYS_TGKILL), retAllow},
		{"mbind", call(t, unix.SYS_MBIND), retAllow},
		{"set_mempolicy", call(t, unix.SYS_SET_MEMPOLICY), retAllow},
		{"seccomp (stacking)", call(t, unix.SYS_SECCOMP), retAllow},
		{"landlock_create_ruleset", call(t, unix.SYS_LANDLOCK_CREATE_RULESET), retAllow},
		{"connect (pointer args are not seen)", call(t, unix.SYS_CONNECT), retAllow},

		// 2. ENOSYS.
		{"clone3", call(t, unix.SYS_CLONE3), retENOSYS},
		{"io_uring_setup", call(t, unix.SYS_IO_URING_SETUP), retENOSYS},
		{"io_uring_enter", call(t, unix.SYS_IO_URING_ENTER), retENOSYS},
		{"io_uring_register", call(t, unix.SYS_IO_URING_REGISTER), retENOSYS},

		// 3. A sample of the unconditional EPERMs (all: TestProgramSweep).
		{"ptrace", call(t, unix.SYS_PTRACE, unix.PTRACE_TRACEME), retEPERM},
		{"unshare", call(t, unix.SYS_UNSHARE, unix.CLONE_FILES), retEPERM},
		{"memfd_create", call(t, unix.SYS_MEMFD_CREATE), retEPERM},
		{"open_tree_attr", call(t, nrOf(t, "open_tree_attr")), retEPERM},
		{"lsm_list_modules", call(t, nrOf(t, "lsm_list_modules")), retEPERM},

		// 4. clone: flags are arg0 on both architectures.
		{"clone fork", call(t, unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		{"clone thread", call(t, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|
			unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS|
			unix.CLONE_PARENT_SETTID|unix.CLONE_CHILD_CLEARTID), retAllow},
		{"clone vfork pidfd", call(t, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD|uint64(unix.SIGCHLD)), retAllow},
		{"clone high word only", call(t, unix.SYS_CLONE, hi|uint64(unix.SIGCHLD)), retAllow},
		{"clone NEWUSER", call(t, unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), retEPERM},
		{"clone NEWNS", call(t, unix.SYS_CLONE, unix.CLONE_NEWNS), retEPERM},
		{"clone NEWCGROUP", call(t, unix.SYS_CLONE, unix.CLONE_NEWCGROUP), retEPERM},
		{"clone NEWUTS", call(t, unix.SYS_CLONE, unix.CLONE_NEWUTS), retEPERM},
		{"clone NEWIPC", call(t, unix.SYS_CLONE, unix.CLONE_NEWIPC), retEPERM},
		{"clone NEWPID", call(t, unix.SYS_CLONE, unix.CLONE_NEWPID), retEPERM},
		{"clone NEWNET", call(t, unix.SYS_CLONE, unix.CLONE_NEWNET|hi), retEPERM},
		{"clone NEWTIME", call(t, unix.SYS_CLONE, unix.CLONE_NEWTIME), retEPERM},

		// ioctl: cmd is arg1, compared on its low 32 bits.
		{"ioctl TIOCSTI", call(t, unix.SYS_IOCTL, 0, unix.TIOCSTI), retEPERM},
		{"ioctl TIOCSTI high bit", call(t, unix.SYS_IOCTL, 0, hi|unix.TIOCSTI), retEPERM},
		{"ioctl TIOCSTI all high bits", call(t, unix.SYS_IOCTL, 0, 0xffffffff_00000000|unix.TIOCSTI), retEPERM},
		{"ioctl TIOCLINUX", call(t, unix.SYS_IOCTL, 0, unix.TIOCLINUX), retEPERM},
		{"ioctl TIOCCONS", call(t, unix.SYS_IOCTL, 0, hi|unix.TIOCCONS), retEPERM},
		{"ioctl TIOCGWINSZ", call(t, unix.SYS_IOCTL, 0, unix.TIOCGWINSZ), retAllow},
		{"ioctl TCGETS", call(t, unix.SYS_IOCTL, 1, unix.TCGETS), retAllow},
		{"ioctl FIONREAD (TIOCINQ)", call(t, unix.SYS_IOCTL, 3, unix.TIOCINQ), retAllow},
		{"ioctl TIOCSTI value in arg2", call(t, unix.SYS_IOCTL, unix.TIOCSTI, unix.TIOCGWINSZ, unix.TIOCSTI), retAllow},

		// socket: domain arg0, type arg1 & 0xf.
		{"socket inet stream", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), retAllow},
		{"socket inet stream|cloexec", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), retAllow},
		{"socket inet6 dgram|nonblock|cloexec", call(t, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP), retAllow},
		{"socket inet6 stream", call(t, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM), retAllow},
		{"socket inet dgram icmp (ping)", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), retAllow},
		{"socket inet high word in domain", call(t, unix.SYS_SOCKET, hi|unix.AF_INET, unix.SOCK_STREAM), retAllow},
		{"socket inet raw", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP), retEPERM},
		{"socket inet6 raw|cloexec", call(t, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC), retEPERM},
		{"socket inet seqpacket", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_SEQPACKET), retEPERM},
		{"socket inet packet", call(t, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_PACKET), retEPERM},
		{"socket inet type 0", call(t, unix.SYS_SOCKET, unix.AF_INET, 0), retEPERM},
		{"socket unix default", call(t, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), retEPERM},
		{"socket unspec", call(t, unix.SYS_SOCKET, unix.AF_UNSPEC, unix.SOCK_STREAM), retEPERM},
		{"socket netlink", call(t, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), retEPERM},
		{"socket netlink dgram", call(t, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM), retEPERM},
		{"socket packet", call(t, unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM), retEPERM},
		{"socket vsock", call(t, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), retEPERM},
		{"socket alg", call(t, unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET), retEPERM},
		{"socket key", call(t, unix.SYS_SOCKET, unix.AF_KEY, unix.SOCK_RAW), retEPERM},
		{"socket bluetooth", call(t, unix.SYS_SOCKET, unix.AF_BLUETOOTH, unix.SOCK_STREAM), retEPERM},
		{"socket netlink with inet high word", call(t, unix.SYS_SOCKET, uint64(unix.AF_INET)<<32|unix.AF_NETLINK, unix.SOCK_DGRAM), retEPERM},

		// socketpair: AF_UNIX only.
		{"socketpair unix", call(t, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), retAllow},
		{"socketpair unix seqpacket", call(t, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET), retAllow},
		{"socketpair inet", call(t, unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM), retEPERM},
		{"socketpair netlink", call(t, unix.SYS_SOCKETPAIR, unix.AF_NETLINK, unix.SOCK_RAW), retEPERM},

		// kill: pid arg0 as a 32-bit pid_t.
		{"kill -1", call(t, unix.SYS_KILL, 0xffffffff, uint64(unix.SIGKILL)), retEPERM},
		{"kill -1 sign-extended", call(t, unix.SYS_KILL, 0xffffffff_ffffffff, 0), retEPERM},
		{"kill 0", call(t, unix.SYS_KILL, 0, uint64(unix.SIGTERM)), retAllow},
		{"kill 123", call(t, unix.SYS_KILL, 123, uint64(unix.SIGTERM)), retAllow},
		{"kill -123 (process group)", call(t, unix.SYS_KILL, 0xffffffff_ffffff85, uint64(unix.SIGTERM)), retAllow},

		// personality: arg0.
		{"personality PER_LINUX", call(t, unix.SYS_PERSONALITY, 0), retAllow},
		{"personality query", call(t, unix.SYS_PERSONALITY, 0xffffffff), retAllow},
		{"personality ADDR_NO_RANDOMIZE", call(t, unix.SYS_PERSONALITY, addrNoRandomize), retEPERM},
		{"personality READ_IMPLIES_EXEC", call(t, unix.SYS_PERSONALITY, readImpliesExec), retEPERM},
		{"personality PER_LINUX32", call(t, unix.SYS_PERSONALITY, perLinux32), retEPERM},

		// execveat: flags arg4.
		{"execveat AT_EMPTY_PATH", call(t, unix.SYS_EXECVEAT, 3, 0, 0, 0, unix.AT_EMPTY_PATH), retEPERM},
		{"execveat AT_EMPTY_PATH|NOFOLLOW", call(t, unix.SYS_EXECVEAT, 3, 0, 0, 0, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW), retEPERM},
		{"execveat path", call(t, unix.SYS_EXECVEAT, unix.AT_FDCWD&0xffffffff, 0, 0, 0, 0), retAllow},
		{"execveat NOFOLLOW", call(t, unix.SYS_EXECVEAT, 3, 0, 0, 0, unix.AT_SYMLINK_NOFOLLOW), retAllow},
		{"execveat AT_EMPTY_PATH in arg3", call(t, unix.SYS_EXECVEAT, 3, 0, 0, unix.AT_EMPTY_PATH, 0), retAllow},

		// prctl: option arg0.
		{"prctl PR_SET_MM", call(t, unix.SYS_PRCTL, unix.PR_SET_MM, unix.PR_SET_MM_START_CODE), retEPERM},
		{"prctl PR_SET_MM high word", call(t, unix.SYS_PRCTL, hi|unix.PR_SET_MM), retEPERM},
		{"prctl PR_SET_NAME", call(t, unix.SYS_PRCTL, unix.PR_SET_NAME), retAllow},
		{"prctl PR_SET_NO_NEW_PRIVS", call(t, unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1), retAllow},
		{"prctl PR_SET_PDEATHSIG", call(t, unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uint64(unix.SIGKILL)), retAllow},
	}
	vm := newVM(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdict(t, vm, tc.data); got != tc.want {
				t.Errorf("nr %d arch %#x args %#x: got %s, want %s",
					tc.data.NR, tc.data.Arch, tc.data.Args, verdictName(got), verdictName(tc.want))
			}
		})
	}
}

// TestProgramSweep checks every syscall number below 1024 with zero
// arguments against the tables, for both option values.
func TestProgramSweep(t *testing.T) {
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[uint32]uint32)
	for _, name := range epermSyscalls {
		if nr, ok := arch.nums[name]; ok {
			want[nr] = retEPERM
		}
	}
	for _, name := range enosysSyscalls {
		want[arch.nums[name]] = retENOSYS
	}
	// Argument rules with all-zero arguments.
	want[arch.nums["socket"]] = retEPERM     // AF_UNSPEC
	want[arch.nums["socketpair"]] = retEPERM // AF_UNSPEC
	for _, name := range argSyscalls {
		if nr, ok := arch.nums[name]; ok && name != "socket" && name != "socketpair" {
			want[nr] = retAllow
		}
	}
	if got := len(want); got != len(arch.nums) {
		t.Fatalf("%d distinct numbers for %d names: two names share a number", got, len(arch.nums))
	}

	vm := newVM(t)
	for nr := uint32(0); nr < 1024; nr++ {
		w, ok := want[nr]
		if !ok {
			w = retAllow
		}
		if got := verdict(t, vm, call(t, uintptr(nr))); got != w {
			t.Errorf("syscall %d: got %s, want %s", nr, verdictName(got), verdictName(w))
		}
	}
}

func TestProgramShape(t *testing.T) {
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) == 0 || len(prog) > 4096 { // BPF_MAXINSNS
		t.Fatalf("program has %d instructions", len(prog))
	}
	// ld [4] (arch) first, a return last.
	if first := prog[0]; first.Code != unix.BPF_LD|unix.BPF_W|unix.BPF_ABS || first.K != offArch {
		t.Errorf("first instruction %+v, want ld [%d]", first, offArch)
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K {
		t.Errorf("last instruction %+v is not a return", last)
	}
	// Only loads within seccomp_data (64 bytes), 32-bit aligned.
	for i, f := range prog {
		if f.Code&0x07 == unix.BPF_LD && (f.K%4 != 0 || f.K >= 64) {
			t.Errorf("instruction %d loads offset %d", i, f.K)
		}
	}
	t.Logf("%d instructions", len(prog))
}

func TestArchTable(t *testing.T) {
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	policy := map[string]bool{}
	for _, list := range [][]string{enosysSyscalls[:], epermSyscalls[:], argSyscalls[:]} {
		for _, name := range list {
			if policy[name] {
				t.Errorf("%s is in the policy twice", name)
			}
			policy[name] = true
		}
	}
	for name := range arch.nums {
		if !policy[name] {
			t.Errorf("%s table has %s, which no rule uses", arch.name, name)
		}
	}
	for _, name := range arch.absent {
		if _, ok := arch.nums[name]; ok {
			t.Errorf("%s is both absent and numbered", name)
		}
		if !policy[name] {
			t.Errorf("absent %s is not in the policy", name)
		}
	}
	for name := range policy {
		if _, _, err := arch.lookup(name); err != nil {
			t.Error(err)
		}
	}
}

func TestAssembler(t *testing.T) {
	tests := []struct {
		name    string
		build   func(a *assembler)
		wantErr bool
	}{
		{"forward jump", func(a *assembler) {
			l := a.newLabel()
			a.jumpIf(bpf.JumpEqual, 1, l, next)
			a.emit(bpf.RetConstant{Val: 0})
			a.bind(l)
			a.emit(bpf.RetConstant{Val: 1})
		}, false},
		{"conditional jump of 256", func(a *assembler) {
			l := a.newLabel()
			a.jumpIf(bpf.JumpEqual, 1, l, next)
			for range 256 {
				a.emit(bpf.RetConstant{Val: 0})
			}
			a.bind(l)
			a.emit(bpf.RetConstant{Val: 1})
		}, true},
		{"unconditional jump of 256", func(a *assembler) {
			l := a.newLabel()
			a.jump(l)
			for range 256 {
				a.emit(bpf.RetConstant{Val: 0})
			}
			a.bind(l)
			a.emit(bpf.RetConstant{Val: 1})
		}, false},
		{"unbound label", func(a *assembler) {
			a.jump(a.newLabel())
			a.emit(bpf.RetConstant{Val: 0})
		}, true},
		{"label past the end", func(a *assembler) {
			l := a.newLabel()
			a.jump(l)
			a.emit(bpf.RetConstant{Val: 0})
			a.bind(l)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAssembler()
			tc.build(a)
			prog, err := a.assemble()
			if (err != nil) != tc.wantErr {
				t.Fatalf("assemble: err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil {
				if _, err := bpf.NewVM(prog); err != nil {
					t.Errorf("bpf.NewVM: %v", err)
				}
			}
		})
	}
}

// TestSignalsToInit: no process in the sandbox signals PID 1, its init,
// by any of the signal syscalls; other targets stay allowed.
func TestSignalsToInit(t *testing.T) {
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	vm := newVM(t)
	for _, name := range []string{"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"} {
		for _, tc := range []struct {
			pid  uint64
			want uint32
		}{{1, retEPERM}, {1 | 1<<32, retEPERM}, {2, retAllow}, {42, retAllow}} {
			d := seccompData{NR: int32(arch.nums[name]), Arch: arch.auditArch, Args: [6]uint64{tc.pid, 15}}
			if got := verdict(t, vm, d); got != tc.want {
				t.Errorf("%s(%#x, SIGTERM): got %s, want %s", name, tc.pid, verdictName(got), verdictName(tc.want))
			}
		}
	}
}

// TestModeAndInitRules: setuid/setgid modes, and the calls that could
// starve or signal init through a side door.
func TestModeAndInitRules(t *testing.T) {
	arch, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	vm := newVM(t)
	type tc struct {
		name string
		args [6]uint64
		want uint32
	}
	tests := []tc{
		{"fchmod", [6]uint64{3, 0o4755}, retEPERM},
		{"fchmod", [6]uint64{3, 0o2755}, retEPERM},
		{"fchmod", [6]uint64{3, 0o755}, retAllow},
		{"fchmod", [6]uint64{3, 0o1777}, retAllow}, // sticky is harmless
		{"fchmodat", [6]uint64{unix.AT_FDCWD & 0xffffffff, 0, 0o4755}, retEPERM},
		{"fchmodat", [6]uint64{unix.AT_FDCWD & 0xffffffff, 0, 0o644}, retAllow},
		{"fchmodat2", [6]uint64{3, 0, 0o6755}, retEPERM},
		{"openat", [6]uint64{3, 0, unix.O_CREAT, 0o4755}, retEPERM},
		{"openat", [6]uint64{3, 0, unix.O_CREAT, 0o644}, retAllow},
		{"mknodat", [6]uint64{3, 0, unix.S_IFREG | 0o4755}, retEPERM},
		{"mkdirat", [6]uint64{3, 0, 0o2775}, retEPERM},
		{"mkdirat", [6]uint64{3, 0, 0o775}, retAllow},
		{"openat2", [6]uint64{3, 0, 0, 24}, retENOSYS},
		{"prlimit64", [6]uint64{1, unix.RLIMIT_NOFILE}, retEPERM},
		{"prlimit64", [6]uint64{0, unix.RLIMIT_NOFILE}, retAllow},
		{"fcntl", [6]uint64{3, unix.F_SETOWN, 1}, retEPERM},
		{"fcntl", [6]uint64{3, unix.F_SETOWN, 0xffffffff}, retEPERM},
		{"fcntl", [6]uint64{3, unix.F_SETOWN, 42}, retAllow},
		{"fcntl", [6]uint64{3, unix.F_SETOWN_EX, 0}, retEPERM},
		{"fcntl", [6]uint64{3, unix.F_SETFL, unix.O_NONBLOCK}, retAllow},
		{"socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM, 132}, retEPERM}, // SCTP
		{"socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}, retAllow},
		{"socket", [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6}, retAllow},
	}
	if _, ok := arch.nums["chmod"]; ok {
		tests = append(tests, tc{"chmod", [6]uint64{0, 0o4755}, retEPERM}, tc{"open", [6]uint64{0, unix.O_CREAT, 0o2755}, retEPERM},
			tc{"creat", [6]uint64{0, 0o4700}, retEPERM}, tc{"mkdir", [6]uint64{0, 0o2700}, retEPERM}, tc{"mkdir", [6]uint64{0, 0o700}, retAllow})
	}
	for _, tt := range tests {
		d := seccompData{NR: int32(arch.nums[tt.name]), Arch: arch.auditArch, Args: tt.args}
		if got := verdict(t, vm, d); got != tt.want {
			t.Errorf("%s%v: got %s, want %s", tt.name, tt.args[:4], verdictName(got), verdictName(tt.want))
		}
	}
}
