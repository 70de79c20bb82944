// Package egress gives a sandbox whose network namespace has only loopback
// a narrow, audited way out. It has two sides that share one Unix
// SOCK_SEQPACKET control socket (a socketpair whose sandbox end is
// inherited by the sandbox's init process).
//
// # Sandbox side: package relay
//
// The relay (package relay, apart so that the sandbox's init links none of
// the host side) runs inside the sandbox. It listens on 127.0.0.1 at a few ports
// (the CONNECT proxy port, 18080 by default, and the ports of granted
// host-side MCP servers) and, optionally, on UDP 127.0.0.1:53. The Relay
// makes no decisions and is not trusted: every accepted TCP connection is
// passed as it is (a duplicate of its socket) to the host over the control
// socket, and the relay closes its copy; it never copies a byte. The host
// reads and writes the agent's connection directly (and splices it to the
// target without copying through user space). DNS queries are answered NXDOMAIN at once and only
// reported to the host, so that a program that tries to resolve names
// itself fails fast and its attempt shows up in the audit log.
//
// # Control protocol
//
// Messages go from the relay to the host only; SOCK_SEQPACKET keeps their
// boundaries:
//
//	'C' port(uint16 BE)                with exactly one fd in SCM_RIGHTS
//	'D' qtype(uint16 BE) name(ASCII, 1..255 bytes)  with no fd
//
// 'C' announces a connection accepted on 127.0.0.1:port inside the sandbox;
// the fd is that connection's socket (the host also accepts a Unix stream
// socket there). 'D' reports a DNS query. Anything else (wrong length,
// unknown type, missing or extra fds, an fd that is not a stream socket) is audited as a "control" event
// and dropped; every fd that came with it is closed. An empty message reads
// as end of file.
//
// # Host side: Proxy
//
// The Proxy reads the control socket (ServeControl) and serves each passed
// connection (ServeConn). All policy is enforced here, and the port in a
// 'C' message only selects which granted behaviour applies:
//
//   - On Policy.ProxyPort the connection must speak HTTP CONNECT. The
//     request is read with a size limit and a deadline, the target is
//     normalised (lower case, one trailing dot dropped, only letters,
//     digits, dots and hyphens, no IPv6 brackets; IPv4 literals only in
//     canonical dotted-quad form, other numeric forms such as 127.1 or
//     0x7f000001 are refused as ambiguous) and checked against
//     Policy.Allow before any DNS lookup. An allowed name is resolved once;
//     every answer is checked with CheckAddr (unless the grant is Private)
//     and the proxy dials the validated address itself, so DNS rebinding
//     between check and use is impossible.
//   - On a port in Policy.MCPPorts the connection goes straight to
//     127.0.0.1:port on the host, the only way to reach host loopback
//     without a Private grant.
//   - Any other port is refused.
//
// The policy can change while the proxy serves (SetPolicy, ChangeGrants):
// each connection reads the policy in force once, when it is served, so a
// change applies to later connections and one already open is not cut.
//
// Every attempt, allowed or denied, produces exactly one Event for the
// audit log, with the bytes relayed each way and the duration.
//
// The relay and the proxy are Linux-only: the relay serves a Linux network
// namespace, the control socket checks what it is passed with SO_DOMAIN,
// the pump reads TCP_INFO, and the host's own addresses come from
// rtnetlink; that code is in _linux.go files. What only describes egress,
// the grants and the policy (grant.go) and the audit Event (event.go), is
// in plain files, so that the packages that parse grants or read audit
// records (profiles, the daemon's requests, the audit sinks) build on
// every system.
package egress
