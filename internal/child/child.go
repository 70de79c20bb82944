package child

import "time"

// Spec describes a child to start.
type Spec struct {
	// Argv is the command line; Argv[0] is looked up in PATH.
	Argv []string
	// Dir is the working directory; empty means the caller's.
	Dir string
	// Env is appended to the inherited environment (minus systemd's
	// activation variables).
	Env []string
	// Supervise starts the child under a supervisor process (the program
	// re-executed, see IsGate) that kills the child's whole group when
	// this process dies, even by SIGKILL, and starts the child with no
	// capabilities (bounding set included) and no_new_privs.
	Supervise bool
	// User, if set, is who the child runs as; it needs Supervise.
	User *Identity
	// Ledger, if set, keeps a record of each live child so that a
	// successor can kill what a killed predecessor left (see Ledger).
	Ledger *Ledger
}

// Grace holds the shutdown waits.
type Grace struct {
	// AfterStdinClose is how long to wait for a voluntary exit after stdin is closed.
	AfterStdinClose time.Duration
	// AfterTerm is how long to wait after SIGTERM before killing everything.
	AfterTerm time.Duration
}

// DefaultGrace is the shutdown timing used unless configured otherwise.
var DefaultGrace = Grace{AfterStdinClose: 2 * time.Second, AfterTerm: 3 * time.Second}
