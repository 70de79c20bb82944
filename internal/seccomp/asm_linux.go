package seccomp

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// label names a position in a program under construction. The zero label,
// next, means "the instruction right after this one".
type label int

// next is the fall-through target of a conditional jump.
const next label = 0

// fixup is a jump whose offsets are resolved once every label is bound.
type fixup struct {
	idx    int          // index of the jump in the program
	uncond bool         // ja (32-bit offset) instead of a conditional jump
	cond   bpf.JumpTest // test of a conditional jump
	val    uint32       // constant operand of a conditional jump
	jt, jf label        // targets of a conditional jump; ja uses jt
}

// assembler builds a classic BPF program with symbolic forward jumps.
// Classic BPF only jumps forward, and a conditional jump only by up to 255
// instructions; assemble reports a jump that does not fit rather than
// building a wrong program.
type assembler struct {
	prog   []bpf.Instruction
	fixups []fixup
	labels []int // position of each label; -1 while unbound; labels[0] unused
}

func newAssembler() *assembler {
	return &assembler{labels: []int{-1}}
}

// newLabel returns a fresh, unbound label.
func (a *assembler) newLabel() label {
	a.labels = append(a.labels, -1)
	return label(len(a.labels) - 1)
}

// bind places l at the next instruction to be emitted.
func (a *assembler) bind(l label) {
	a.labels[l] = len(a.prog)
}

// emit appends a non-jump instruction.
func (a *assembler) emit(ins bpf.Instruction) {
	a.prog = append(a.prog, ins)
}

// jumpIf appends "if A <cond> val goto jt else goto jf".
func (a *assembler) jumpIf(cond bpf.JumpTest, val uint32, jt, jf label) {
	a.fixups = append(a.fixups, fixup{idx: len(a.prog), cond: cond, val: val, jt: jt, jf: jf})
	a.prog = append(a.prog, nil)
}

// jump appends an unconditional "goto to".
func (a *assembler) jump(to label) {
	a.fixups = append(a.fixups, fixup{idx: len(a.prog), uncond: true, jt: to})
	a.prog = append(a.prog, nil)
}

// skip returns how many instructions a jump at idx must skip to reach l.
func (a *assembler) skip(idx int, l label, limit int) (int, error) {
	if l == next {
		return 0, nil
	}
	pos := a.labels[l]
	if pos < 0 {
		return 0, fmt.Errorf("jump at %d to unbound label %d", idx, l)
	}
	s := pos - (idx + 1)
	if s < 0 {
		return 0, fmt.Errorf("jump at %d to label %d goes backwards", idx, l)
	}
	if s > limit {
		return 0, fmt.Errorf("jump at %d to label %d skips %d instructions, more than %d", idx, l, s, limit)
	}
	if pos >= len(a.prog) {
		return 0, fmt.Errorf("jump at %d to label %d leaves the program", idx, l)
	}
	return s, nil
}

// assemble resolves every jump and returns the finished program.
func (a *assembler) assemble() ([]bpf.Instruction, error) {
	out := make([]bpf.Instruction, len(a.prog))
	copy(out, a.prog)
	for _, f := range a.fixups {
		if f.uncond {
			s, err := a.skip(f.idx, f.jt, int(^uint32(0)>>1))
			if err != nil {
				return nil, err
			}
			out[f.idx] = bpf.Jump{Skip: uint32(s)}
			continue
		}
		jt, err := a.skip(f.idx, f.jt, 255)
		if err != nil {
			return nil, err
		}
		jf, err := a.skip(f.idx, f.jf, 255)
		if err != nil {
			return nil, err
		}
		out[f.idx] = bpf.JumpIf{Cond: f.cond, Val: f.val, SkipTrue: uint8(jt), SkipFalse: uint8(jf)}
	}
	return out, nil
}
