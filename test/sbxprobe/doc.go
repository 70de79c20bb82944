// Command sbxprobe plays the attacker inside a soda sandbox: it tries, one
// by one, the escapes that the sandbox (namespaces, Landlock, seccomp,
// no_new_privs, the relay, the cgroup) must stop, and reports each attempt
// as one JSON row. The test harness runs it through "sodactl run" and
// asserts on the rows; run outside any sandbox most rows must come out NOT
// blocked, which shows the probes can tell an escape from a denial.
//
// README.md beside this file lists every row and what "blocked" means for it.
//
// Usage:
//
//	sbxprobe battery [flags]      run every probe, print {"results":[...]}
//	sbxprobe forkbomb N           start up to N sleeping children
//	sbxprobe memhog MB            allocate and touch MB MiB
//	sbxprobe orphan               leave a setsid daemon behind
//	sbxprobe cpuburn SECONDS      burn 2 threads of CPU
//	sbxprobe connect [flags] TARGET   CONNECT through the relay, echo a line
//	sbxprobe probe-child NAME ... internal: one risky probe in a subprocess
//
// Battery flags (all optional; a probe whose input is missing is reported
// with "skipped":true):
//
//	--unix PATHS          pathname Unix sockets that exist on the host
//	--abstract NAMES      abstract socket names the host listens on (no @)
//	--host-pid N          a host process to signal, trace and read
//	--host-tcp PORT       a port the host listens on at 127.0.0.1
//	--proxy ADDR          the relay (default 127.0.0.1:18080)
//	--deny-connect LIST   host:port targets the relay must refuse
//	--allow-connect T     host:port echo target the relay must pass
//	--workspace DIR       the writable workspace
//	--host-home DIR       the invoking user's real home (hidden inside)
//	--host-machine-id ID  the host's machine-id (the sandbox must see another)
//	--host-boot-id ID     the host's boot id (likewise)
//	--host-cmdline-sha256 H  SHA-256 of the host's /proc/cmdline (likewise)
//	--host-macs LIST      the host's MAC addresses (none may be visible)
//	--plant PATHS         files to try to create (the harness checks the host)
//	--secret-env NAMES    variables that must not be visible
//	--offhost-tcp LIST    off-host TCP targets (default 169.254.169.254:80,8.8.8.8:53)
//	--offhost-udp LIST    off-host DNS servers (default 8.8.8.8:53,1.1.1.1:53)
//	--offhost-force       contact off-host targets even when a route exists
//	--resolver ADDR       DNS server for the name lookup (default: system)
//	--dns-name NAME       name to look up (default secret-token.exfil.example)
//	--timeout D           per-probe timeout (default 2s)
//	--only REGEXP         run only the probes whose name matches
//
// Off-host targets are only contacted when this network namespace has no
// route through a non-loopback interface (so nothing can leave), when the
// targets were given explicitly, or with --offhost-force; otherwise those
// rows are skipped and the "net-routes" row reports the route as an escape.
//
// The probes are Linux's (Landlock, seccomp, namespaces, /proc): every
// file with code is a _linux.go file, and on other systems the program
// only says so (main_other.go).
//
// The runtime's cgroup-aware GOMAXPROCS is turned off so that the runtime
// keeps no cgroup files open, which the inherited-fds row would report.
//
//go:debug containermaxprocs=0
package main
