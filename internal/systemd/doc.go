// Package systemd integrates soda's daemons with systemd when it is there:
// socket activation, sd_notify readiness and status, the watchdog, and
// native journal logging with structured fields. Every function degrades to
// a no-op (or reports "not activated") when the process does not run under
// systemd, so the daemons behave the same in the foreground.
package systemd
