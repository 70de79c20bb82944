package seccomp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filterBuilder emits the filter's layers (build) on an assembler. Its
// labels are the shared verdicts every layer jumps to; verdicts binds them
// at the end of the program.
type filterBuilder struct {
	*assembler
	allow, deny, nosys, kill label
}

// newFilterBuilder returns a builder with its verdict labels unbound.
func newFilterBuilder() *filterBuilder {
	a := newAssembler()
	return &filterBuilder{assembler: a,
		allow: a.newLabel(), deny: a.newLabel(), nosys: a.newLabel(), kill: a.newLabel()}
}

// foreignABIs emits layer 1: foreign ABIs die: i386 (int 0x80) and x32 on
// x86_64, aarch32 on aarch64. Their syscall numbers mean other things, so
// no rule below would apply to them. It leaves the syscall number loaded.
func (f *filterBuilder) foreignABIs(arch *archInfo) {
	f.emit(bpf.LoadAbsolute{Off: offArch, Size: 4})
	f.jumpIf(bpf.JumpEqual, arch.auditArch, next, f.kill)
	f.emit(bpf.LoadAbsolute{Off: offNr, Size: 4})
	if arch.x32 {
		f.jumpIf(bpf.JumpGreaterOrEqual, x32SyscallBit, f.kill, next)
	}
}

// unconditional emits layers 2 and 3: the syscalls that fail with ENOSYS,
// then those that fail with EPERM, whatever their arguments.
func (f *filterBuilder) unconditional(nrs policyNumbers) {
	for _, nr := range nrs.enosys {
		f.jumpIf(bpf.JumpEqual, nr, f.nosys, next)
	}
	for _, nr := range nrs.eperm {
		f.jumpIf(bpf.JumpEqual, nr, f.deny, next)
	}
}

// dispatch emits layer 4's head: a jump on the syscall number to each
// argument rule's block. It returns the blocks' labels by syscall name,
// for argRules to bind; a syscall absent from argNrs has none.
func (f *filterBuilder) dispatch(argNrs map[string]uint32) map[string]label {
	blocks := make(map[string]label, len(argSyscalls))
	for _, name := range argSyscalls {
		if _, ok := argNrs[name]; !ok {
			continue
		}
		blocks[name] = f.newLabel()
		f.jumpIf(bpf.JumpEqual, argNrs[name], blocks[name], next)
	}
	return blocks
}

// argRules emits layer 4's blocks, one for each label of blocks (from
// dispatch), each ending in a jump to a verdict.
//
// Every argument compared is a 32-bit int in the kernel's prototype
// (clone's flags are truncated with lower_32_bits), so only the low word
// is loaded: the kernel ignores the high word, and a filter that compared
// it would let 0x5412|1<<32 through as TIOCSTI.
func (f *filterBuilder) argRules(blocks map[string]label) {
	f.cloneRule(blocks["clone"])
	f.ioctlRule(blocks["ioctl"])
	f.socketRule(blocks["socket"])
	f.socketpairRule(blocks["socketpair"])
	f.signalRules(blocks)
	f.fcntlRule(blocks["fcntl"])
	f.modeRules(blocks)
	f.personalityRule(blocks["personality"])
	f.execveatRule(blocks["execveat"])
	f.prctlRule(blocks["prctl"])
}

// cloneRule emits clone(flags, …): no new namespaces.
func (f *filterBuilder) cloneRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpBitsSet, cloneNamespaceFlags, f.deny, f.allow)
}

// ioctlRule emits ioctl(fd, cmd, …): no terminal input injection or
// console takeover.
func (f *filterBuilder) ioctlRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(1), Size: 4})
	for _, cmd := range []uint32{unix.TIOCSTI, unix.TIOCLINUX, unix.TIOCCONS} {
		f.jumpIf(bpf.JumpEqual, cmd, f.deny, next)
	}
	f.jump(f.allow)
}

// socketRule emits socket(domain, type, protocol): TCP and UDP over IPv4
// and IPv6.
func (f *filterBuilder) socketRule(at label) {
	f.bind(at)
	inet := f.newLabel()
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, unix.AF_INET, inet, next)
	f.jumpIf(bpf.JumpEqual, unix.AF_INET6, inet, next)
	f.jump(f.deny)
	f.bind(inet)
	inetProto := f.newLabel()
	f.emit(bpf.LoadAbsolute{Off: argLow(1), Size: 4})
	f.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask})
	f.jumpIf(bpf.JumpEqual, unix.SOCK_STREAM, inetProto, next)
	f.jumpIf(bpf.JumpEqual, unix.SOCK_DGRAM, inetProto, f.deny)
	// protocol: the default, TCP, UDP or ICMP (ping sockets); not SCTP,
	// DCCP, UDP-Lite… whose first use would load a kernel module.
	f.bind(inetProto)
	f.emit(bpf.LoadAbsolute{Off: argLow(2), Size: 4})
	for _, p := range []uint32{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6} {
		f.jumpIf(bpf.JumpEqual, p, f.allow, next)
	}
	f.jump(f.deny)
}

// socketpairRule emits socketpair(domain, …): AF_UNIX only.
func (f *filterBuilder) socketpairRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, unix.AF_UNIX, f.allow, f.deny)
}

// signalRules emits the rules that keep the sandbox's init (PID 1 of its
// PID namespace), which relays its egress, out of reach of signals and
// resource limits set by others.
func (f *filterBuilder) signalRules(blocks map[string]label) {
	// kill(pid, sig): not every process at once, and not init.
	f.bind(blocks["kill"])
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, killAll, f.deny, next)
	f.jumpIf(bpf.JumpEqual, sandboxInit, f.deny, f.allow)

	// tkill(tid, …), tgkill(tgid, …), rt_sigqueueinfo(tgid, …),
	// rt_tgsigqueueinfo(tgid, …): no signal to init either.
	for _, name := range []string{"tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"} {
		f.bind(blocks[name])
		f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
		f.jumpIf(bpf.JumpEqual, sandboxInit, f.deny, f.allow)
	}

	// prlimit64(pid, …): not init (it would starve its relay of
	// descriptors).
	f.bind(blocks["prlimit64"])
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, sandboxInit, f.deny, f.allow)
}

// fcntlRule emits fcntl(fd, cmd, arg): no F_SETOWN to init or its process
// group, which would let a descriptor's I/O signals hit init; F_SETOWN_EX
// passes its target in a struct, so it is refused altogether.
func (f *filterBuilder) fcntlRule(at label) {
	f.bind(at)
	setown := f.newLabel()
	f.emit(bpf.LoadAbsolute{Off: argLow(1), Size: 4})
	f.jumpIf(bpf.JumpEqual, unix.F_SETOWN_EX, f.deny, next)
	f.jumpIf(bpf.JumpEqual, unix.F_SETOWN, setown, f.allow)
	f.bind(setown)
	f.emit(bpf.LoadAbsolute{Off: argLow(2), Size: 4})
	f.jumpIf(bpf.JumpEqual, sandboxInit, f.deny, next)
	f.jumpIf(bpf.JumpEqual, killAll, f.deny, f.allow) // -1: process group 1
}

// modeRules emits chmod and file creation: no setuid or setgid bit (see
// modeArg). A mode syscall the architecture lacks has no block.
func (f *filterBuilder) modeRules(blocks map[string]label) {
	for _, name := range argSyscalls {
		i, isMode := modeArg[name]
		if _, present := blocks[name]; !isMode || !present {
			continue
		}
		f.bind(blocks[name])
		f.emit(bpf.LoadAbsolute{Off: argLow(i), Size: 4})
		f.jumpIf(bpf.JumpBitsSet, unix.S_ISUID|unix.S_ISGID, f.deny, f.allow)
	}
}

// personalityRule emits personality(persona): query or plain PER_LINUX
// only.
func (f *filterBuilder) personalityRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, personalityLinux, f.allow, next)
	f.jumpIf(bpf.JumpEqual, personalityQuery, f.allow, f.deny)
}

// execveatRule emits execveat(dirfd, path, argv, envp, flags): no exec of
// an open fd.
func (f *filterBuilder) execveatRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(4), Size: 4})
	f.jumpIf(bpf.JumpBitsSet, unix.AT_EMPTY_PATH, f.deny, f.allow)
}

// prctlRule emits prctl(option, …): no rewriting of the memory map's
// descriptors.
func (f *filterBuilder) prctlRule(at label) {
	f.bind(at)
	f.emit(bpf.LoadAbsolute{Off: argLow(0), Size: 4})
	f.jumpIf(bpf.JumpEqual, unix.PR_SET_MM, f.deny, f.allow)
}

// verdicts binds the shared verdict labels to their return instructions,
// at the end of the program.
func (f *filterBuilder) verdicts() {
	f.bind(f.allow)
	f.emit(bpf.RetConstant{Val: retAllow})
	f.bind(f.deny)
	f.emit(bpf.RetConstant{Val: retEPERM})
	f.bind(f.nosys)
	f.emit(bpf.RetConstant{Val: retENOSYS})
	f.bind(f.kill)
	f.emit(bpf.RetConstant{Val: retKill})
}
