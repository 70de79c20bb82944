// Package e2e holds soda's end-to-end tests on a real systemd: they build
// the .deb, boot systemd 252 as PID 1 in a throw-away box (test/box/sdbox),
// install the package there and drive soda-mcp@NAME units through socket
// activation, sd_notify, journald, transient scopes, credentials, restart,
// stop and removal, with real MCP clients and servers on 127.0.0.1 only.
// TestPolkit boots a box of its own and asks the real polkitd, through
// internal/polkit and the shipped D-Bus policy and polkit actions, about an
// unprivileged caller and root (test/polkitcheck owns sodad's bus name).
// TestSodad installs sodad (binary, unit, bus activation, bus policy, polkit
// actions, example rules, a profile) in a box of its own and drives it over
// the system bus as unprivileged users and root (test/sodadcall passes its
// stdio as Unix fds): exit statuses, ownership and polkit decisions, grants
// at run time seen by the agent inside, watchdog, idle exit and activation,
// drain on restart and cleanup after kill -9, 100 create/exit cycles.
// TestSodadHostLoad installs sodad the same way, in a box with cgroup
// hybrid and one with cgroup v2 (skipped where its cgroup2 has no cpu and
// pids controllers), runs a fork bomb and a CPU burner in a sandbox of a
// user's and times true, python3 and ps -e on the host meanwhile
// (test/testkit's probe): the host must stay responsive.
//
// The tests need root and a host that passes "test/box/sdbox check"; they
// skip with a message saying what is missing otherwise. Run them with
// "make test-e2e" (test/e2e/e2e.mk) or "go test -count=1 -v ./test/e2e/".
//
// Environment:
//
//	SODA_E2E_DEB=FILE     install FILE instead of building the .deb
//	SODA_E2E_CGROUP=MODE  v2 or hybrid (default: hybrid when the host has
//	                      cgroup v1 hierarchies, so MemoryMax= is enforced)
//	SODA_E2E_KEEP=1       keep the box up after the test (for debugging;
//	                      tear it down with test/box/sdbox down DIR)
package e2e
