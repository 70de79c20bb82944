// Package sandbox runs a command in a sandbox built from the kernel's own
// parts, and fails closed when one of them cannot be had.
//
// The host side (New, Linux.Start) checks the spec, leases a uid for root
// callers, creates the cgroup (a transient systemd scope, or a directory
// of its own), and executes the init binary Config.InitPath
// (soda-sandbox-init, see FindInit and internal/sandboxinit) as the
// sandbox's PID 1 in new user (for unprivileged callers), mount, pid,
// network, IPC, UTS and cgroup namespaces, sending it its configuration
// (internal/sandbox/wire). Init builds a private root (read-only system
// directories, the grants mounted as checked and their protected paths
// read-only, a tmpfs home, fresh /proc and /sys, per-sandbox identity
// files), sets up the egress relay (internal/egress), confines itself
// (bounding set, uid, no_new_privs, Landlock, rlimits, seccomp) and only
// then forks the command. The host serves the relay's connections through
// the egress proxy, records the audit trail (Record) and tears everything
// down when the command ends (Sandbox.Wait). docs/sandbox.md describes
// each layer and what it stops.
//
// Building sandboxes is Linux-only, and that code is in _linux.go files.
// What only describes a sandbox (Spec, Limits, Record, ExitStatus,
// ExecSpec, HandoverState, Config, the layers, the environment filter,
// FindInit) is in plain files, and sandbox_other.go gives other systems
// an engine whose New fails ("sandboxes need Linux"), so that the packages
// that describe, request or audit sandboxes build there.
package sandbox
