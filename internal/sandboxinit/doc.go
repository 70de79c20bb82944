// Package sandboxinit is the sandbox's PID 1, soda-sandbox-init
// (cmd/soda-sandbox-init): the host side (internal/sandbox) executes it in
// new user (for unprivileged callers), mount, pid, network, IPC, UTS and
// cgroup namespaces and sends it its configuration (internal/sandbox/wire).
// Init builds a private root (rootfs_linux.go: read-only system directories,
// the grants mounted as checked and their protected paths read-only, a
// tmpfs home, fresh /proc and /sys, per-sandbox identity files), sets up
// the egress relay (internal/egress/relay), confines itself (confine_linux.go:
// bounding set, uid, no_new_privs, Landlock, rlimits, seccomp) and only
// then forks the command, or, for a live sandbox, every command the host
// sends (exec_linux.go). The same binary, in its hold role, is the process
// the host makes each idmapped mount's user namespace with (and kills once
// it has opened the namespace).
//
// It links only what PID 1 uses: none of the host side, the MCP bridge,
// its HTTP front, go-sdk or D-Bus (cmd/soda-sandbox-init's deps_test.go
// checks).
//
// The package is Linux-only: every file with code is a _linux.go file but
// main_other.go, which gives other systems an IsInit that reports false,
// so that cmd/soda-sandbox-init builds there and only says that it is not
// for direct use.
package sandboxinit
