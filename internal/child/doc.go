// Package child starts stdio MCP servers as supervised child processes.
//
// Each child runs in its own process group and in a group of an
// internal/cgroup placer (a transient systemd scope, a cgroup v2
// directory, v1 hierarchies, or only the process group), so that
// everything it spawns can be killed as a whole. Shutdown follows the MCP
// stdio rules: close stdin, wait, SIGTERM, wait, then kill everything
// left.
//
// A program that starts children must call RunGate when IsGate reports
// true, first thing in main: a scope placer starts every child as a gate
// (the program re-executed, see cgroup.IsGate), and Spec.Supervise starts
// it under a supervisor, which is the program re-executed too.
//
// With Spec.Supervise the child is started by a supervisor (see
// supervisor_linux.go) that outlives the caller just long enough to kill
// the child's whole group if the caller dies, and that starts the child
// without capabilities and with no_new_privs, as Spec.User. A Ledger
// records live children (their pids, supervisors and groups) so that a
// successor can kill what a killed predecessor and its supervisors left;
// it belongs here, not with placement: what it records and recovers are
// the processes Start started, and a group only as one of their places.
//
// Starting children is Linux-only: process groups aside, everything it does
// goes through cgroups, /proc and Linux process attributes (no_new_privs,
// capabilities, parent-death signals), and that code is in _linux.go
// files. What only describes a child (Spec, Grace, Identity, Ledger) is in
// plain files, and child_other.go gives other systems a Start, OpenLedger
// and gate entry point that fail ("child processes need Linux"), so that
// the bridge and the daemons that use it build there.
package child
