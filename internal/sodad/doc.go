// Package sodad is soda's supervisor: a system service that owns every
// sandbox of a host, holds each sandbox's egress allow-list and audit, and
// answers on the system bus as io.github.soda_project.Soda1 behind polkit
// (docs/dbus-api.md is the API's reference, sodad(8) the daemon's manual).
//
// Run connects to the system bus, takes the bus name (failing when another
// process holds it), exports the Manager object and one object per sandbox
// with their properties (godbus prop) and introspection, and reports
// readiness and watchdog pings to systemd. Every sandbox is started through
// one privileged sandbox engine (internal/sandbox) held for the daemon's
// life, each in its own transient scope under systemd; the egress proxy of
// every sandbox runs in this process, so its allow-list changes only through
// the API.
//
// Who calls is taken from the bus (GetConnectionCredentials of the
// message's sender), never from arguments; polkit is asked about the
// caller's unique bus name (internal/polkit), in one place (authorize) for
// every method, with the action the method and its request need: one per
// operation (create, grant, beyond-profile, exec, kill, read-audit), and
// for another user's sandbox its -other variant (names.go).
//
// A record per sandbox is kept in the state directory under a lock
// (state.go). This first version cannot re-adopt a sandbox after a restart
// (its egress proxy died with the old process): on start, every record left
// is ended (its scope stopped by the engine's SweepLeftovers), the outcome
// logged in the journal ("ended: sodad restarted") and the record removed.
package sodad
