//go:build linux

package seccomp

// archProbes are the aarch64-only probes: none, the legacy calls do not
// exist there.
func archProbes() map[string]func() error { return nil }

// archProbeCases are the aarch64-only expectations: none.
func archProbeCases() []probeCase { return nil }
