package sandbox

import (
	"errors"
	"os"
	"time"
)

// ExecSpec is one command to run in a live sandbox.
type ExecSpec struct {
	// Argv is the command; Argv[0] is looked up in the sandbox's PATH.
	Argv []string
	// Env is added to the sandbox's environment, filtered by FilterEnv.
	Env []string
	// Dir is the working directory inside the sandbox (empty: the
	// sandbox's).
	Dir string
	// Stdin, Stdout, Stderr are the command's (nil: /dev/null); no
	// terminal is made for it (Spec.TTY is for the one-command path).
	Stdin, Stdout, Stderr *os.File
	// Timeout kills the command's process group (SIGKILL); 0: none.
	Timeout time.Duration
	// EndOthers ends, when the command ends (or is killed at its
	// timeout), every process of the sandbox but its init and the
	// sessions of the other commands running at that moment: init sends
	// them SIGKILL and reports the command's exit only once they are all
	// dead, so nothing the command left (a background job, a setsid or
	// double-forked daemon, nohup, a process that ignores SIGTERM, a fork
	// loop) acts after Exec returns. A process that another running
	// command started in a session of its own (setsid) is ended too. See
	// internal/sandboxinit/endothers_linux.go.
	EndOthers bool
}

// ErrNotPersistent is returned by Exec on a sandbox started without
// Spec.Persistent.
var ErrNotPersistent = errors.New("sandbox: not a live sandbox (Spec.Persistent)")
