// Package relay is the sandbox's side of egress: it runs in the sandbox's
// init, listens on 127.0.0.1 at the relayed ports (and UDP 127.0.0.1:53),
// and hands every accepted TCP connection, as its own socket, to the host
// over the SOCK_SEQPACKET control socket; DNS queries are answered
// NXDOMAIN and reported. It decides nothing and is not trusted: package
// egress, on the host, reads the control socket, decides, audits and
// relays (see its documentation for the protocol).
//
// It is a package of its own so that the sandbox's init links only this
// (net, x/net/dns/dnsmessage, x/sys/unix) and not the host side's HTTP,
// TLS and policy code: every sandbox start pays for the size of init's
// binary (its start-up, page faults and package initialisation).
package relay
