package sodad

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/profile"
)

// Bounds of a request: anything larger is InvalidSpec (a caller must not
// make sodad hold megabytes for it).
const (
	maxArgs      = 4096    // argv entries
	maxArgBytes  = 1 << 17 // argv and environment bytes together
	maxListItems = 256     // entries of any other list
	maxString    = 4096    // bytes of one string
)

// identityKeys are keys a caller might use to claim an identity: they are
// refused as InvalidArgs, so a claim can never take effect.
var identityKeys = map[string]bool{"owner": true, "uid": true, "user": true, "gid": true, "OwnerUID": true, "UID": true, "User": true}

// request is a decoded CreateSandbox spec.
type request struct {
	profile.Request
	Env     []string
	Dir     string
	Timeout time.Duration
	TTY     bool
	// Persistent: a live sandbox that runs what Exec asks (argv empty),
	// with a private workspace of Limits.WorkspaceSize.
	Persistent bool
}

// options are a method's decoded options.
type options struct {
	Interactive bool
	Private     bool // Grant/Revoke: an AllowPrivate target
}

// decodeOptions decodes a{sv} options; allowed names the keys the method
// takes besides "interactive".
func decodeOptions(in map[string]dbus.Variant, allowed ...string) (options, *dbus.Error) {
	var o options
	for _, k := range sortedKeys(in) {
		v := in[k]
		switch {
		case k == "interactive":
			b, ok := v.Value().(bool)
			if !ok {
				return o, dbusErr(ErrInvalidArgs, fmt.Sprintf("option interactive: want type b, got %s", v.Signature()))
			}
			o.Interactive = b
		case k == "private" && contains(allowed, "private"):
			b, ok := v.Value().(bool)
			if !ok {
				return o, dbusErr(ErrInvalidArgs, fmt.Sprintf("option private: want type b, got %s", v.Signature()))
			}
			o.Private = b
		default:
			return o, dbusErr(ErrInvalidArgs, fmt.Sprintf("unknown option %q", k))
		}
	}
	return o, nil
}

// decodeArgv checks the command line.
func decodeArgv(argv []string) *dbus.Error {
	if len(argv) == 0 {
		return dbusErr(ErrInvalidArgs, "argv is empty: name the command to run")
	}
	if len(argv) > maxArgs {
		return dbusErr(ErrInvalidSpec, fmt.Sprintf("argv: %d arguments, at most %d", len(argv), maxArgs))
	}
	n := 0
	for _, a := range argv {
		n += len(a) + 1
		if strings.IndexByte(a, 0) >= 0 {
			return dbusErr(ErrInvalidSpec, "argv: an argument holds a NUL byte")
		}
	}
	if n > maxArgBytes {
		return dbusErr(ErrInvalidSpec, fmt.Sprintf("argv: %d bytes, at most %d", n, maxArgBytes))
	}
	if argv[0] == "" {
		return dbusErr(ErrInvalidSpec, "argv: the command is empty")
	}
	return nil
}

// decodeSpec turns CreateSandbox's spec into a request. Every error is a
// D-Bus error naming the key.
func decodeSpec(spec map[string]dbus.Variant) (request, *dbus.Error) {
	var r request
	bad := func(k, f string, a ...any) (request, *dbus.Error) {
		return request{}, dbusErr(ErrInvalidSpec, k+": "+fmt.Sprintf(f, a...))
	}
	for _, k := range sortedKeys(spec) {
		v := spec[k]
		if identityKeys[k] {
			return request{}, dbusErr(ErrInvalidArgs, fmt.Sprintf("spec key %q: the caller's identity comes from the bus, never from arguments", k))
		}
		want := specTypes[k]
		if want == "" {
			return bad(k, "unknown key")
		}
		if got := v.Signature().String(); got != want {
			return bad(k, "want type %s, got %s", want, got)
		}
		switch want {
		case "as":
			l := v.Value().([]string)
			if len(l) > maxListItems {
				return bad(k, "%d entries, at most %d", len(l), maxListItems)
			}
			for _, s := range l {
				if len(s) > maxString || strings.IndexByte(s, 0) >= 0 {
					return bad(k, "an entry is longer than %d bytes or holds a NUL byte", maxString)
				}
			}
			if l == nil {
				l = []string{}
			}
			switch k {
			case "MCP":
				r.MCP = l
			case "Allow", "AllowPrivate":
				if r.Allow == nil {
					r.Allow = []egress.Grant{}
				}
				for _, s := range l {
					g, err := egress.ParseGrant(s, k == "AllowPrivate")
					if err != nil {
						return request{}, dbusErr(ErrInvalidTarget, fmt.Sprintf("%s %q: %v", k, s, err))
					}
					r.Allow = append(r.Allow, g)
				}
			case "ReadWritePaths":
				r.ReadWrite = l
			case "ReadOnlyPaths":
				r.ReadOnly = l
			case "Environment":
				for _, e := range l {
					if i := strings.IndexByte(e, '='); i <= 0 {
						return bad(k, "%q is not NAME=VALUE", e)
					}
				}
				r.Env = l
			}
		case "b":
			b := v.Value().(bool)
			switch k {
			case "NoNetwork":
				r.NoNetwork = b
			case "TTY":
				r.TTY = b
			case "Persistent":
				r.Persistent = b
			}
		case "s":
			s := v.Value().(string)
			if len(s) > maxString {
				return bad(k, "longer than %d bytes", maxString)
			}
			r.Dir = s
		case "t":
			n := v.Value().(uint64)
			if n > math.MaxInt64 {
				return bad(k, "%d is too large", n)
			}
			switch k {
			case "MemoryMax":
				r.Limits.MemoryMax = int64(n)
			case "TmpSize":
				r.Limits.TmpSize = int64(n)
			case "HomeSize":
				r.Limits.HomeSize = int64(n)
			case "WorkspaceSize":
				r.Limits.WorkspaceSize = int64(n)
			case "TasksMax":
				r.Limits.TasksMax = int64(n)
			case "CPUQuotaPercent":
				if n > 100*1024 {
					return bad(k, "%d%% is more than 1024 CPUs", n)
				}
				r.Limits.CPUPercent = n
			case "TimeoutUSec":
				if n > uint64(math.MaxInt64/int64(time.Microsecond)) {
					return bad(k, "%d µs is too long", n)
				}
				r.Limits.Timeout = time.Duration(n) * time.Microsecond
			}
		}
	}
	n := 0
	for _, e := range r.Env {
		n += len(e) + 1
	}
	if n > maxArgBytes {
		return bad("Environment", "%d bytes, at most %d", n, maxArgBytes)
	}
	if r.NoNetwork && (len(r.MCP) > 0 || len(r.Allow) > 0) {
		return bad("NoNetwork", "excludes MCP, Allow and AllowPrivate")
	}
	return r, nil
}

// specTypes are the spec's keys and their D-Bus types.
var specTypes = map[string]string{
	"MCP": "as", "Allow": "as", "AllowPrivate": "as", "NoNetwork": "b",
	"ReadWritePaths": "as", "ReadOnlyPaths": "as", "WorkingDirectory": "s",
	"Environment": "as", "MemoryMax": "t", "TmpSize": "t", "HomeSize": "t",
	"TasksMax": "t", "CPUQuotaPercent": "t", "TimeoutUSec": "t", "TTY": "b",
	"Persistent": "b", "WorkspaceSize": "t",
}

// streams are a sandbox's standard streams, checked.
type streams struct {
	Stdin, Stdout, Stderr *os.File
	TTY                   bool
}

// fdKind is what checkFd found an fd to be.
type fdKind struct {
	readable, writable, terminal, directory, path bool
}

// inspectFd looks at an open fd: its access mode, whether it is a
// terminal or a directory.
func inspectFd(fd int) (fdKind, error) {
	var k fdKind
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return k, fmt.Errorf("fstat: %w", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return k, fmt.Errorf("fcntl: %w", err)
	}
	if fl&unix.O_PATH != 0 {
		k.path = true
		return k, nil
	}
	switch fl & unix.O_ACCMODE {
	case unix.O_RDONLY:
		k.readable = true
	case unix.O_WRONLY:
		k.writable = true
	case unix.O_RDWR:
		k.readable, k.writable = true, true
	}
	k.directory = st.Mode&unix.S_IFMT == unix.S_IFDIR
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		k.terminal = true
	}
	return k, nil
}

// checkFds checks that each fd is what its key claims and returns the
// streams; the files in fds stay the caller's (closed by it).
func checkFds(fds map[string]*os.File, tty bool) (streams, *dbus.Error) {
	var s streams
	for _, key := range sortedKeys(fds) {
		f := fds[key]
		k, err := inspectFd(int(f.Fd()))
		bad := func(why string) (streams, *dbus.Error) {
			return streams{}, dbusErr(ErrInvalidFd, fmt.Sprintf("fd %s: %s", key, why))
		}
		switch {
		case err != nil:
			return bad(err.Error())
		case k.path:
			return bad("an O_PATH fd cannot be read or written")
		case k.directory:
			return bad("a directory")
		}
		switch key {
		case "stdin":
			if !k.readable {
				return bad("not open for reading")
			}
			s.Stdin = f
		case "stdout", "stderr":
			if !k.writable {
				return bad("not open for writing")
			}
			if key == "stdout" {
				s.Stdout = f
			} else {
				s.Stderr = f
			}
		case "tty":
			if !k.terminal {
				return bad("not a terminal")
			}
			if !k.readable || !k.writable {
				return bad("a terminal must be open for reading and writing")
			}
			s.Stdin, s.Stdout, s.Stderr, s.TTY = f, f, f, true
		default:
			return bad("unknown key (stdin, stdout, stderr or tty)")
		}
	}
	if _, ok := fds["tty"]; ok && len(fds) > 1 {
		return streams{}, dbusErr(ErrInvalidFd, "fd tty: passed with stdin, stdout or stderr; a terminal comes alone")
	}
	if tty && !s.TTY {
		return streams{}, dbusErr(ErrInvalidFd, "fd tty: spec TTY is set but fds holds no tty")
	}
	if s.TTY && !tty {
		return streams{}, dbusErr(ErrInvalidFd, "fd tty: passed without spec TTY")
	}
	return s, nil
}

// parseTarget parses a Grant or Revoke target: HOST:PORT or mcp:NAME.
func parseTarget(t string, private bool) (grant egress.Grant, mcp string, err *dbus.Error) {
	if name, ok := strings.CutPrefix(t, "mcp:"); ok {
		if name == "" {
			return egress.Grant{}, "", dbusErr(ErrInvalidTarget, fmt.Sprintf("target %q: no server name", t))
		}
		return egress.Grant{}, name, nil
	}
	g, e := egress.ParseGrant(t, private)
	if e != nil {
		return egress.Grant{}, "", dbusErr(ErrInvalidTarget, fmt.Sprintf("target %q: %v (want HOST:PORT or mcp:NAME)", t, e))
	}
	return g, "", nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func closeFd(fd int) { _ = unix.Close(fd) }
