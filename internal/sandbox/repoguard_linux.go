package sandbox

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// The host side of the repository guard (internal/sandboxinit/repoguard_linux.go):
// init's status pipe stays open after the command starts, and the guard's
// "protected" and "refused" reports on it become audit records.

// keepStatus returns a copy of init's status pipe that outlives Start
// (which closes its own) and the channel closed when it has been read to
// the end.
func keepStatus(statR *os.File) (*os.File, chan struct{}) {
	done := make(chan struct{})
	rc, err := statR.SyscallConn()
	if err != nil {
		return statR, done
	}
	dup := -1
	_ = rc.Control(func(fd uintptr) { dup, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	if dup < 0 {
		return statR, done
	}
	return os.NewFile(uintptr(dup), "status"), done
}

// awaitStatus waits (a moment) for the end of init's status pipe, once
// the sandbox has ended, so that the guard's last records come before the
// exit record.
func (sb *Sandbox) awaitStatus() {
	if sb.statusDone == nil {
		return
	}
	select {
	case <-sb.statusDone:
	case <-time.After(2 * time.Second):
		sb.log.Warn("sandbox status pipe still open after the sandbox ended")
	}
}

// guardRecord records what the repository guard reported.
func (sb *Sandbox) guardRecord(m wire.Status) {
	switch m.Event {
	case "refused":
		sb.log.Warn("sandbox: "+m.Detail, "part", "repository guard")
	case "protected":
		sb.log.Info("sandbox: "+m.Detail, "part", "repository guard")
	default:
		return
	}
	sb.record(Record{Event: m.Event, Detail: m.Detail})
}
