package sodad

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sandbox"
)

// maxExecTimeout bounds an Exec's time-out (and is its default).
const maxExecTimeout = time.Hour

// Exec runs argv in a persistent sandbox (spec Persistent) with the
// caller's fds as its streams and returns how it ended: its exit status,
// the signal that killed it, and whether its time-out did. Options: dir
// (s, inside the sandbox: /workspace or below, the sandbox's home or a
// granted path), timeout (t, µs, at most an hour; 0: an hour),
// interactive (b). Only the owner, or a caller polkit grants
// manage-other, may.
func (m sandboxMethods) Exec(sender dbus.Sender, argv []string, opts map[string]dbus.Variant, fds map[string]dbus.Variant) (int32, string, bool, *dbus.Error) {
	b := m.b
	files, owned, badFd := receiveFds(fds)
	defer func() {
		for _, f := range owned {
			f.Close()
		}
	}()
	c, ctx, cancel, err := b.d.begin(sender)
	if err != nil {
		return 0, "", false, err
	}
	defer cancel()
	if badFd != "" {
		return 0, "", false, dbusErr(ErrInvalidFd, badFd)
	}
	rest := maps.Clone(opts)
	dir, timeout := "", maxExecTimeout
	if v, ok := rest["dir"]; ok {
		s, ok := v.Value().(string)
		if !ok {
			return 0, "", false, dbusErr(ErrInvalidArgs, fmt.Sprintf("option dir: want type s, got %s", v.Signature()))
		}
		if len(s) > maxString || !path.IsAbs(s) || path.Clean(s) != s || strings.IndexByte(s, 0) >= 0 {
			return 0, "", false, dbusErr(ErrInvalidArgs, fmt.Sprintf("option dir %q: want a clean absolute path inside the sandbox", s))
		}
		dir = s
		delete(rest, "dir")
	}
	if v, ok := rest["timeout"]; ok {
		us, ok := v.Value().(uint64)
		if !ok {
			return 0, "", false, dbusErr(ErrInvalidArgs, fmt.Sprintf("option timeout: want type t (µs), got %s", v.Signature()))
		}
		if us > 0 && us < uint64(maxExecTimeout/time.Microsecond) {
			timeout = time.Duration(us) * time.Microsecond
		}
		delete(rest, "timeout")
	}
	o, err := decodeOptions(rest)
	if err != nil {
		return 0, "", false, err
	}
	if err := decodeArgv(argv); err != nil {
		return 0, "", false, err
	}
	st, err := checkFds(files, false)
	if err != nil {
		return 0, "", false, err
	}
	if err := b.d.authz.owned(ctx, c, b.owner, "", b.details(), o.Interactive, "", ""); err != nil {
		return 0, "", false, err
	}
	sb := b.running()
	if sb == nil {
		return 0, "", false, dbusErr(ErrNotRunning, fmt.Sprintf("sandbox %s is not running", b.id))
	}
	b.d.touch()
	es, e := sb.Exec(b.d.run, sandbox.ExecSpec{Argv: argv, Dir: dir, Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, Timeout: timeout})
	b.d.touch()
	if errors.Is(e, sandbox.ErrNotPersistent) {
		return 0, "", false, dbusErr(ErrNotPersistent, fmt.Sprintf("sandbox %s runs one command: create it with spec Persistent to Exec in it", b.id))
	}
	if e != nil {
		return 0, "", false, dbusErr(ErrFailed, fmt.Sprintf("exec %s in %s: %v", argv[0], b.id, e))
	}
	return int32(es.Code), es.Signal, es.TimedOut, nil
}
