package child

// A Ledger keeps one small record per live child in a directory: its
// group (kind, cgroup directory, scope unit, process group), its pid and
// its supervisor's pid, each with its start time so that a reused pid is
// never mistaken for it, and the pid and start time of the process that
// started it. A child's record is written once it runs and removed once
// Stop has emptied and released its group.
//
// A record that outlives its owner is what a killed soda-mcpd left behind
// when even its children's supervisors could not finish (they were killed
// too, or the machine's service manager killed them with it): Recover, run
// at start-up before serving, kills what is left of each such group and
// removes the record.
type Ledger struct {
	dir        string
	ownerStart uint64
}
