// Package sandbox runs a command in a sandbox built from the kernel's own
// parts, and fails closed when one of them cannot be had.
//
// The host side (Linux.Start) checks the spec, leases a uid for root
// callers, creates the cgroup (a transient systemd scope, or a directory
// of its own), and re-executes the calling binary as the sandbox's PID 1
// ("soda-sandbox-init", see IsInit and Main) in new user (for
// unprivileged callers), mount, pid, network, IPC, UTS and cgroup
// namespaces. Init builds a private root (rootfs.go: read-only system
// directories, the grants mounted as checked, a tmpfs home, fresh /proc
// and /sys, per-sandbox identity files), sets up the egress relay
// (internal/egress), confines itself (confine.go: bounding set, uid,
// no_new_privs, Landlock, rlimits, seccomp) and only then forks the
// command. The host serves the relay's connections through the egress
// proxy, records the audit trail (Record) and tears everything down when
// the command ends (Sandbox.Wait). docs/sandbox.md describes each layer
// and what it stops.
package sandbox
