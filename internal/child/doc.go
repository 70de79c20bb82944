// Package child starts stdio MCP servers as supervised child processes.
//
// Each child runs in its own process group and in its own cgroup: a
// transient systemd scope when systemd is PID 1 (NewSystemdPlacer; the
// child starts as a gate, see IsGate, and execs the real command only once
// it is inside its scope), else a cgroup v2 directory when the host lets
// soda create one (NewPlacer), so that everything it spawns can be killed
// as a whole. Failing both, only the process group remains. For root on a
// cgroup v1/v2 hybrid host, NewCgroup1Placer puts a child in directories
// of the v1 memory, pids and cpu hierarchies (the sandbox uses it).
// Shutdown follows the MCP stdio rules: close stdin, wait, SIGTERM, wait,
// then kill everything left.
//
// With Spec.Supervise the child is started by a supervisor (the program
// re-executed, see IsGate and supervisor_linux.go) that outlives the caller just
// long enough to kill the child's whole group if the caller dies, and that
// starts the child without capabilities and with no_new_privs, as
// Spec.User. A Ledger records live children so that a successor can kill
// what a killed predecessor and its supervisors left.
//
// Starting children is Linux-only: process groups aside, everything it does
// goes through cgroups, systemd over D-Bus, /proc and Linux process
// attributes (no_new_privs, capabilities, parent-death signals), and that
// code is in _linux.go files. What only describes a child (Spec, Grace,
// Limits, Identity, the Group and Placer interfaces, LimitEvents) is in
// plain files, and child_other.go gives other systems a Start, NewPlacer,
// NewSystemdPlacer and OpenLedger that fail ("child processes need
// Linux"), so that the bridge and the daemons that use it build there.
package child
