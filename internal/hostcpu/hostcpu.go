// Package hostcpu holds the one CPU figure soda derives from the host:
// the CPU quota of a sandbox and of all sandboxes together. It is a
// package of its own so that the sandbox engine and the systemd
// generator (which writes it into soda-sandbox.slice) share it without
// the generator linking the engine.
package hostcpu

// SandboxPercent is the CPU quota, in percent of one CPU, that soda gives
// by default to each sandbox and to all of a host's sandboxes together on
// a host of ncpu CPUs: 100 × max(1, ncpu−1), one CPU less than the host
// has and at least one. Sandboxes that keep every CPU they may have busy
// (fork bombs, runaway builds) then still leave the host a CPU of its own
// (docs/sandbox.md, "Host cost").
func SandboxPercent(ncpu int) uint64 { return 100 * uint64(max(1, ncpu-1)) }
