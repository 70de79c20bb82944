package child

import "github.com/soda-project/soda/internal/cgroup"

// GateExitCode is the exit status of a gate that did not exec the real
// command (see cgroup.GateExitCode).
const GateExitCode = cgroup.GateExitCode

// IsGate reports whether this process was started as a child gate (see
// cgroup.IsGate) or as a child's supervisor (see Spec.Supervise): both are
// the program re-executed. A program that starts children must check this
// first thing in main and call RunGate:
//
//	func main() {
//		if child.IsGate() {
//			child.RunGate()
//		}
//		...
//	}
func IsGate() bool {
	return cgroup.IsGate() || isSupervisor()
}

// RunGate runs the gate or the supervisor this process was started as;
// it never returns. A gate waits until the parent has placed it in its
// group and then replaces itself with the real command (cgroup.RunGate);
// a supervisor runs until its parent closes its control socket or dies,
// then kills what is left of its child and exits.
func RunGate() {
	if isSupervisor() {
		runSupervisorMain()
	}
	cgroup.RunGate()
}
