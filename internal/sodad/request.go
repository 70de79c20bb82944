package sodad

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandbox/wire"
	"github.com/soda-project/soda/internal/sodadapi"
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
	// RunMCP are the caller's own MCP servers for this sandbox (sodactl
	// run --mcp-config): allowed by the profile's PerRunMCP=.
	RunMCP []sodadapi.RunServer
	// Masks are files the sandbox sees with other contents (the agent's
	// configuration without its secrets), inside the granted paths.
	Masks []sandbox.Mask
}

// maxRunMCP bounds RunMCP and Masks.
const maxRunMCP = 64

// decodeRunMCP decodes RunMCP.
func decodeRunMCP(v []sodadapi.RunServerEntry) ([]sodadapi.RunServer, error) {
	if len(v) > maxRunMCP {
		return nil, fmt.Errorf("%d entries, at most %d", len(v), maxRunMCP)
	}
	var out []sodadapi.RunServer
	seen := map[string]bool{}
	for _, e := range v {
		name, props := e.Name, e.Props
		if !validServerName(name) {
			return nil, fmt.Errorf("name %q: 1 to 64 letters, digits, '-', '_' or '.'", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: named twice", name)
		}
		seen[name] = true
		s := sodadapi.RunServer{Name: name}
		for _, k := range sortedKeys(props) {
			var err error
			val := props[k].Value()
			switch k {
			case "Port":
				p, ok := val.(uint16)
				if !ok || p == 0 {
					err = errors.New("want a port (q), not 0")
				}
				s.Port = p
			case "Token", "URL", "Command":
				str, ok := val.(string)
				if !ok || len(str) > maxString || strings.IndexByte(str, 0) >= 0 {
					err = fmt.Errorf("want a string (s) of at most %d bytes", maxString)
				}
				switch k {
				case "Token":
					s.Token = str
				case "URL":
					s.URL = str
				default:
					s.Command = str
				}
			case "Args":
				l, ok := val.([]string)
				if !ok || len(l) > maxListItems {
					err = fmt.Errorf("want at most %d strings (as)", maxListItems)
				}
				s.Args = l
			case "Headers", "Env":
				m, ok := val.(map[string]string)
				if !ok || len(m) > maxListItems {
					err = fmt.Errorf("want at most %d pairs (a{ss})", maxListItems)
				}
				if k == "Headers" {
					s.Headers = m
				} else {
					s.Env = m
				}
			default:
				err = errors.New("unknown key (Port, Token, URL, Headers, Command, Args, Env)")
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, k, err)
			}
		}
		kinds := 0
		for _, set := range []bool{s.Port != 0, s.URL != "", s.Command != ""} {
			if set {
				kinds++
			}
		}
		switch {
		case kinds != 1:
			return nil, fmt.Errorf("%s: want exactly one of Port (a server you run), URL (a remote one) or Command (one the agent starts)", name)
		case s.Token != "" && s.Port == 0:
			return nil, fmt.Errorf("%s: Token goes with Port", name)
		case s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
			return nil, fmt.Errorf("%s: URL %q: want http:// or https://", name, s.URL)
		}
		out = append(out, s)
	}
	return out, nil
}

// validServerName accepts the names agents give MCP servers.
func validServerName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// decodeMasks decodes Masks.
func decodeMasks(v []sodadapi.Mask) ([]sandbox.Mask, error) {
	if len(v) > maxRunMCP {
		return nil, fmt.Errorf("%d entries, at most %d", len(v), maxRunMCP)
	}
	var out []sandbox.Mask
	for _, e := range v {
		path, data := e.Path, e.Data
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || len(path) > maxString {
			return nil, fmt.Errorf("path %q: want an absolute, clean path", path)
		}
		if len(data) > wire.MaxMaskBytes {
			return nil, fmt.Errorf("%s: %d bytes, at most %d", path, len(data), wire.MaxMaskBytes)
		}
		out = append(out, sandbox.Mask{Path: path, Data: data})
	}
	return out, nil
}

// options are a method's decoded options.
type options struct {
	Interactive bool
	Private     bool // Grant/Revoke: an AllowPrivate target
}

// decodeOptions decodes a{sv} options; allowed names the keys the method
// takes besides "interactive".
func decodeOptions(in map[string]dbus.Variant, allowed ...string) (options, error) {
	var o options
	for _, k := range sortedKeys(in) {
		v := in[k]
		switch {
		case k == "interactive":
			b, ok := v.Value().(bool)
			if !ok {
				return o, errorf(errInvalidArgs, "option interactive: want type b, got %s", v.Signature())
			}
			o.Interactive = b
		case k == "private" && contains(allowed, "private"):
			b, ok := v.Value().(bool)
			if !ok {
				return o, errorf(errInvalidArgs, "option private: want type b, got %s", v.Signature())
			}
			o.Private = b
		default:
			return o, errorf(errInvalidArgs, "unknown option %q", k)
		}
	}
	return o, nil
}

// decodeArgv checks the command line.
func decodeArgv(argv []string) error {
	if len(argv) == 0 {
		return errorf(errInvalidArgs, "argv is empty: name the command to run")
	}
	if len(argv) > maxArgs {
		return errorf(errInvalidSpec, "argv: %d arguments, at most %d", len(argv), maxArgs)
	}
	n := 0
	for _, a := range argv {
		n += len(a) + 1
		if strings.IndexByte(a, 0) >= 0 {
			return errorf(errInvalidSpec, "argv: an argument holds a NUL byte")
		}
	}
	if n > maxArgBytes {
		return errorf(errInvalidSpec, "argv: %d bytes, at most %d", n, maxArgBytes)
	}
	if argv[0] == "" {
		return errorf(errInvalidSpec, "argv: the command is empty")
	}
	return nil
}

// decodeSpec turns CreateSandbox's spec into a request. Every error
// names the key.
func decodeSpec(spec map[string]dbus.Variant) (request, error) {
	var r request
	bad := func(k, f string, a ...any) (request, error) {
		return request{}, errorf(errInvalidSpec, "%s: %s", k, fmt.Sprintf(f, a...))
	}
	for _, k := range sortedKeys(spec) {
		v := spec[k]
		if identityKeys[k] {
			return request{}, errorf(errInvalidArgs, "spec key %q: the caller's identity comes from the bus, never from arguments", k)
		}
		want := specTypes[k]
		if want == "" {
			return bad(k, "unknown key")
		}
		// godbus gives a message's structs as []interface{}, whose
		// variant says av: those keys are checked by dbus.Store below.
		if got := v.Signature().String(); got != want && !(strings.Contains(want, "(") && strings.HasPrefix(got, "a")) {
			return bad(k, "want type %s, got %s", want, got)
		}
		switch want {
		case "a(sa{sv})":
			var l []sodadapi.RunServerEntry
			if err := dbus.Store([]any{v.Value()}, &l); err != nil {
				return bad(k, "want type %s: %v", want, err)
			}
			rs, err := decodeRunMCP(l)
			if err != nil {
				return bad(k, "%v", err)
			}
			r.RunMCP = rs
		case "a(say)":
			var l []sodadapi.Mask
			if err := dbus.Store([]any{v.Value()}, &l); err != nil {
				return bad(k, "want type %s: %v", want, err)
			}
			ms, err := decodeMasks(l)
			if err != nil {
				return bad(k, "%v", err)
			}
			r.Masks = ms
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
						return request{}, errorf(errInvalidTarget, "%s %q: %w", k, s, err)
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
			case "CPUWeight":
				if n > profile.MaxWeight {
					return bad(k, "%d is above %d", n, profile.MaxWeight)
				}
				r.Limits.CPUWeight = n
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
	if r.NoNetwork && (len(r.MCP) > 0 || len(r.Allow) > 0 || len(r.RunMCP) > 0) {
		return bad("NoNetwork", "excludes MCP, RunMCP, Allow and AllowPrivate")
	}
	return r, nil
}

// specTypes are the spec's keys and their D-Bus types.
var specTypes = map[string]string{
	"MCP": "as", "Allow": "as", "AllowPrivate": "as", "NoNetwork": "b",
	"ReadWritePaths": "as", "ReadOnlyPaths": "as", "WorkingDirectory": "s",
	"Environment": "as", "MemoryMax": "t", "TmpSize": "t", "HomeSize": "t",
	"TasksMax": "t", "CPUQuotaPercent": "t", "CPUWeight": "t", "TimeoutUSec": "t", "TTY": "b",
	"Persistent": "b", "WorkspaceSize": "t", "RunMCP": "a(sa{sv})", "Masks": "a(say)",
}

// streams are a sandbox's standard streams, checked.
type streams struct {
	Stdin, Stdout, Stderr *os.File
	TTY                   bool
	// Life is the caller's life fd (RunMCP): EOF when the caller is gone.
	Life *os.File
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fdKind is what checkFd found an fd to be.
type fdKind struct {
	readable, writable, terminal, directory, path, fifo bool
}

// checkFds checks that each fd is what its key claims and returns the
// streams; the files in fds stay the caller's (closed by it).
func checkFds(fds map[string]*os.File, tty bool) (streams, error) {
	var s streams
	for _, key := range sortedKeys(fds) {
		f := fds[key]
		k, err := inspectFd(int(f.Fd()))
		bad := func(why string) (streams, error) {
			return streams{}, errorf(errInvalidFd, "fd %s: %s", key, why)
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
		case "life":
			// Held open by the caller while it runs its per-run MCP
			// servers: its end (EOF) ends the sandbox.
			if !k.readable || !k.fifo {
				return bad("the read end of a pipe, please (as sodactl passes)")
			}
			s.Life = f
		default:
			return bad("unknown key (stdin, stdout, stderr, tty or life)")
		}
	}
	if _, ok := fds["tty"]; ok && len(fds)-btoi(s.Life != nil) > 1 {
		return streams{}, errorf(errInvalidFd, "fd tty: passed with stdin, stdout or stderr; a terminal comes alone")
	}
	if tty && !s.TTY {
		return streams{}, errorf(errInvalidFd, "fd tty: spec TTY is set but fds holds no tty")
	}
	if s.TTY && !tty {
		return streams{}, errorf(errInvalidFd, "fd tty: passed without spec TTY")
	}
	return s, nil
}

// parseTarget parses a Grant or Revoke target: HOST:PORT or mcp:NAME.
func parseTarget(t string, private bool) (grant egress.Grant, mcp string, err error) {
	if name, ok := strings.CutPrefix(t, "mcp:"); ok {
		if name == "" {
			return egress.Grant{}, "", errorf(errInvalidTarget, "target %q: no server name", t)
		}
		return egress.Grant{}, name, nil
	}
	g, e := egress.ParseGrant(t, private)
	if e != nil {
		return egress.Grant{}, "", errorf(errInvalidTarget, "target %q: %w (want HOST:PORT or mcp:NAME)", t, e)
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
