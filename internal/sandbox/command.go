package sandbox

// CommandError says that the sandbox was built but its command could not
// be started. Code is the exit status a shell would give (126, 127).
type CommandError struct {
	Code int
	Err  error
}

func (e *CommandError) Error() string { return e.Err.Error() }

func (e *CommandError) Unwrap() error { return e.Err }
