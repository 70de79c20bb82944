// Package serverconf reads soda's per-server configuration files
// (/etc/soda/mcp/NAME.conf) written in systemd's INI syntax.
//
// A file looks like this:
//
//	[Server]
//	ExecStart=/usr/bin/node /opt/jira-mcp/index.js --stdio
//	WorkingDirectory=/var/lib/soda/mcp/jira
//	Environment=JIRA_URL=https://jira.example.com "LOG_LEVEL=warn"
//
//	[Bridge]
//	Listen=127.0.0.1:18101
//	MaxSessions=8
//	IdleTimeout=15min
//
//	[Limits]
//	MemoryMax=512M
//	TasksMax=64
//
// Parsing uses go-systemd's unit package, so continuation lines, comments and
// repeated keys behave as they do in unit files. Every error names the file,
// the line and the key at fault.
package serverconf

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

// DefaultDir is where soda-mcpd looks for NAME.conf when started by name.
const DefaultDir = "/etc/soda/mcp"

// DefaultStateDir is where soda keeps tokens and other state.
const DefaultStateDir = "/var/lib/soda"

// Server is the configuration of one bridged MCP server.
type Server struct {
	// Name is the instance name (jira in soda-mcp@jira).
	Name string
	// Path is the file the configuration came from; empty for flag-only setups.
	Path string

	// Command is the stdio server's argv; Command[0] is looked up in PATH.
	Command []string
	// Dir is the child's working directory; empty means the bridge's own.
	Dir string
	// Env holds extra KEY=VALUE pairs added to the child's environment.
	Env []string
	// Credentials map systemd credentials into the child's environment.
	Credentials []Credential
	// User is the user (name or number) the children run as; empty means
	// soda-mcpd's own user, except that a root soda-mcpd never runs
	// children as root unless User=root says so (see soda.conf(5)).
	User string
	// Group is the children's primary group (name or number); empty means
	// User's primary group.
	Group string

	Bridge Bridge
	Limits Limits
}

// Credential maps a systemd credential ($CREDENTIALS_DIRECTORY/Name) to an
// environment variable of the child: its content, or its path when AsPath.
type Credential struct {
	Name   string
	EnvVar string
	AsPath bool
}

// Bridge holds the listener and session settings.
type Bridge struct {
	// Listen is the loopback TCP address to serve on.
	Listen string
	// Auth is "token" (the default) or "none".
	Auth string
	// TokenFile holds the bearer token; generated on first start when absent.
	TokenFile string

	MaxSessions    int
	IdleTimeout    time.Duration
	CallTimeout    time.Duration
	StartTimeout   time.Duration
	MaxConnections int
	MaxHeaderBytes int
	ReadTimeout    time.Duration
	MaxBodyBytes   int64
	// StderrLinesPerSecond caps how many child stderr lines reach the log.
	StderrLinesPerSecond int
	// DrainTimeout bounds how long shutdown waits for in-flight calls.
	DrainTimeout time.Duration
	// ExitIdle, when set and socket-activated, makes the service exit after
	// that long without sessions; the socket starts it again on demand.
	ExitIdle time.Duration
	// ProbeInitialize starts one child and asks it to initialize before
	// reporting readiness.
	ProbeInitialize bool
	// StartOnBoot makes soda-generator enable the instance's socket.
	StartOnBoot bool
	// Metrics serves GET /metrics (Prometheus) on the listener, behind
	// the same token.
	Metrics bool
	// MetricsTextfile writes the metrics every 5 s to
	// /run/soda/metrics/NAME.prom for node_exporter's textfile collector.
	MetricsTextfile bool
}

// Limits are applied to each child's cgroup when the host allows it.
type Limits struct {
	// MemoryMax in bytes; 0 means unlimited.
	MemoryMax int64
	// TasksMax is the maximum number of tasks; 0 means unlimited.
	TasksMax int64
	// CPUWeight is cgroup v2 cpu.weight (1..10000); 0 leaves the default.
	CPUWeight int64
	// CPUQuotaPercent is the CPU time allowed per second, in percent of one
	// CPU (systemd's CPUQuota=); 0 means unlimited.
	CPUQuotaPercent int64
}

// Defaults returns the configuration used when a key is absent.
func Defaults(name string) Server {
	return Server{
		Name: name,
		Bridge: Bridge{
			Listen:               "127.0.0.1:18100",
			Auth:                 "token",
			TokenFile:            filepath.Join(DefaultStateDir, "mcp", name+".token"),
			MaxSessions:          8,
			IdleTimeout:          15 * time.Minute,
			CallTimeout:          5 * time.Minute,
			StartTimeout:         10 * time.Second,
			MaxConnections:       32,
			MaxHeaderBytes:       16 << 10,
			ReadTimeout:          10 * time.Second,
			MaxBodyBytes:         4 << 20,
			StderrLinesPerSecond: 50,
			DrainTimeout:         30 * time.Second,
			Metrics:              true,
		},
	}
}

// PathFor returns the configuration file of the named server in dir.
func PathFor(dir, name string) string {
	return filepath.Join(dir, name+".conf")
}

// ValidName reports whether name can be used as an instance name: it must be
// usable in a unit name and a file name without escaping.
func ValidName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("server name %q must be 1 to 64 characters", name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return fmt.Errorf("server name %q may only hold letters, digits, '-', '_' and '.'", name)
		}
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("server name %q must not start with '.' or '-'", name)
	}
	return nil
}

// Load reads and validates the configuration file at path. The instance name
// is the file's base name without ".conf".
func Load(path string) (Server, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Server{}, fmt.Errorf("read config: %w", err)
	}
	name := strings.TrimSuffix(filepath.Base(path), ".conf")
	if err := ValidName(name); err != nil {
		return Server{}, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, name, data)
}

// Error is a configuration error that names the file, line and key.
type Error struct {
	File string
	Line int
	Key  string // "Section.Key", or empty for syntax errors
	Err  error
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %v", loc, e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v", loc, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Parse parses configuration text. file is used in error messages only.
func Parse(file, name string, data []byte) (Server, error) {
	lines, err := scanLines(file, data)
	if err != nil {
		return Server{}, err
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return Server{}, &Error{File: file, Err: err}
	}
	cfg := Defaults(name)
	cfg.Path = file
	for _, o := range opts {
		key := o.Section + "." + o.Name
		line := lines.next(key)
		if err := apply(&cfg, o); err != nil {
			return Server{}, &Error{File: file, Line: line, Key: key, Err: err}
		}
	}
	if len(cfg.Command) == 0 {
		return Server{}, &Error{File: file, Key: "Server.ExecStart", Err: errors.New("missing: set the stdio MCP server's command line")}
	}
	if err := cfg.Validate(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			ce.File = file
			ce.Line = lines.last(ce.Key)
		}
		return Server{}, err
	}
	return cfg, nil
}

// Option is one Key=Value assignment of a file in systemd's INI syntax,
// with the line it is on.
type Option struct {
	// Section is the section's name, without brackets.
	Section string
	// Name is the key.
	Name string
	// Value is the value with continuation lines joined by a space and
	// surrounding space trimmed, as systemd reads it.
	Value string
	// Line is the line of the assignment (1-based), 0 if unknown.
	Line int
}

// Key returns "Section.Name", the key as errors name it.
func (o Option) Key() string { return o.Section + "." + o.Name }

// ParseOptions splits text in systemd's INI syntax into its assignments,
// in file order, each with its line. Syntax errors are an *Error naming
// file and line. It is what Parse reads NAME.conf with, for other files in
// the same syntax (sandbox profiles).
func ParseOptions(file string, data []byte) ([]Option, error) {
	lines, err := scanLines(file, data)
	if err != nil {
		return nil, err
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return nil, &Error{File: file, Err: err}
	}
	out := make([]Option, len(opts))
	for i, o := range opts {
		out[i] = Option{
			Section: o.Section,
			Name:    o.Name,
			Value:   strings.TrimSpace(strings.ReplaceAll(o.Value, "\\\n", " ")),
			Line:    lines.next(o.Section + "." + o.Name),
		}
	}
	return out, nil
}

// Validate checks values that depend on more than one key.
func (s *Server) Validate() error {
	if len(s.Command) == 0 {
		return &Error{Key: "Server.ExecStart", Err: errors.New("no command to run")}
	}
	if err := CheckLoopback(s.Bridge.Listen); err != nil {
		return &Error{Key: "Bridge.Listen", Err: err}
	}
	return nil
}

// CheckLoopback reports an error unless addr is a loopback host:port.
func CheckLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address; soda listens on 127.0.0.1 or [::1] only (put a TLS reverse proxy in front for remote access)", addr)
	}
	return nil
}

// CheckUserName accepts a user or group name or number as systemd's
// User= does (the usual portable name characters), or empty.
func CheckUserName(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 64 || v[0] == '-' {
		return fmt.Errorf("%q is not a user or group name", v)
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%q is not a user or group name", v)
		}
	}
	return nil
}

func apply(cfg *Server, o *unit.UnitOption) error {
	v := strings.TrimSpace(strings.ReplaceAll(o.Value, "\\\n", " ")) // systemd: a continuation backslash becomes a space
	switch o.Section {
	case "Server":
		switch o.Name {
		case "ExecStart":
			argv, err := SplitCommand(v)
			if err != nil {
				return err
			}
			if len(argv) == 0 {
				return errors.New("empty command")
			}
			cfg.Command = argv
		case "WorkingDirectory":
			if v != "" && !filepath.IsAbs(v) {
				return fmt.Errorf("%q is not an absolute path", v)
			}
			cfg.Dir = v
		case "Environment":
			words, err := SplitCommand(v)
			if err != nil {
				return err
			}
			for _, w := range words {
				k, _, ok := strings.Cut(w, "=")
				if !ok || k == "" || strings.ContainsAny(k, " \t") {
					return fmt.Errorf("%q is not KEY=VALUE", w)
				}
				cfg.Env = append(cfg.Env, w)
			}
		case "Credential", "CredentialFile":
			name, env, ok := strings.Cut(v, ":")
			if !ok || name == "" || env == "" {
				return fmt.Errorf("%q: want CREDENTIAL:ENVVAR", v)
			}
			if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
				return fmt.Errorf("%q is not a credential name", name)
			}
			if strings.ContainsAny(env, "= \t") {
				return fmt.Errorf("%q is not an environment variable name", env)
			}
			cfg.Credentials = append(cfg.Credentials, Credential{Name: name, EnvVar: env, AsPath: o.Name == "CredentialFile"})
		case "User", "Group":
			if err := CheckUserName(v); err != nil {
				return err
			}
			if o.Name == "User" {
				cfg.User = v
			} else {
				cfg.Group = v
			}
		default:
			return errors.New("unknown key (known: ExecStart, WorkingDirectory, Environment, Credential, CredentialFile, User, Group)")
		}
	case "Bridge":
		b := &cfg.Bridge
		var err error
		switch o.Name {
		case "Listen":
			err = CheckLoopback(v)
			b.Listen = v
		case "Auth":
			if v != "token" && v != "none" {
				return fmt.Errorf("%q: want token or none", v)
			}
			b.Auth = v
		case "TokenFile":
			if !filepath.IsAbs(v) {
				return fmt.Errorf("%q is not an absolute path", v)
			}
			b.TokenFile = v
		case "MaxSessions":
			b.MaxSessions, err = positiveInt(v)
		case "MaxConnections":
			b.MaxConnections, err = positiveInt(v)
		case "StderrLinesPerSecond":
			b.StderrLinesPerSecond, err = positiveInt(v)
		case "MaxHeaderBytes":
			var n int64
			n, err = ParseBytes(v)
			b.MaxHeaderBytes = int(n)
		case "MaxBodySize":
			b.MaxBodyBytes, err = ParseBytes(v)
		case "IdleTimeout":
			b.IdleTimeout, err = ParseTimespan(v)
		case "CallTimeout":
			b.CallTimeout, err = ParseTimespan(v)
		case "StartTimeout":
			b.StartTimeout, err = ParseTimespan(v)
		case "ReadTimeout":
			b.ReadTimeout, err = ParseTimespan(v)
		case "DrainTimeout":
			b.DrainTimeout, err = ParseTimespan(v)
		case "ExitIdleSec":
			b.ExitIdle, err = ParseTimespan(v)
		case "ProbeInitialize":
			b.ProbeInitialize, err = parseBool(v)
		case "StartOnBoot":
			b.StartOnBoot, err = parseBool(v)
		case "Metrics":
			b.Metrics, err = parseBool(v)
		case "MetricsTextfile":
			b.MetricsTextfile, err = parseBool(v)
		default:
			return errors.New("unknown key (known: Listen, Auth, TokenFile, MaxSessions, MaxConnections, IdleTimeout, CallTimeout, StartTimeout, ReadTimeout, DrainTimeout, ExitIdleSec, ProbeInitialize, StartOnBoot, Metrics, MetricsTextfile, MaxHeaderBytes, MaxBodySize, StderrLinesPerSecond)")
		}
		return err
	case "Limits":
		var err error
		switch o.Name {
		case "MemoryMax":
			cfg.Limits.MemoryMax, err = ParseBytes(v)
		case "TasksMax":
			var n int
			n, err = positiveInt(v)
			cfg.Limits.TasksMax = int64(n)
		case "CPUWeight":
			var n int
			n, err = positiveInt(v)
			if err == nil && n > 10000 {
				err = fmt.Errorf("%d is above 10000", n)
			}
			cfg.Limits.CPUWeight = int64(n)
		case "CPUQuota":
			p, ok := strings.CutSuffix(v, "%")
			var n int
			if ok {
				n, err = positiveInt(p)
			}
			if !ok || err != nil {
				return fmt.Errorf("%q: want a percentage such as 50%% or 200%%", v)
			}
			cfg.Limits.CPUQuotaPercent = int64(n)
		default:
			return errors.New("unknown key (known: MemoryMax, TasksMax, CPUWeight, CPUQuota)")
		}
		return err
	default:
		return fmt.Errorf("unknown section [%s] (known: [Server], [Bridge], [Limits])", o.Section)
	}
	return nil
}

// ParseBool parses a systemd boolean: 1, yes, true, on or 0, no, false, off.
func ParseBool(v string) (bool, error) { return parseBool(v) }

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on":
		return true, nil
	case "0", "no", "false", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (yes or no)", v)
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive integer", v)
	}
	return n, nil
}

// ParseBytes parses a size with an optional K, M, G or T suffix (base 1024),
// as systemd does for MemoryMax=: an integer, or a decimal fraction with a
// suffix ("1.5G"), rounded down to a byte. It is the one size grammar of
// NAME.conf and of sodactl's flags; sizes are positive and at most 2^62.
func ParseBytes(v string) (int64, error) {
	bad := fmt.Errorf("%q is not a size (examples: 4096, 512K, 1.5G)", v)
	s := strings.TrimSpace(v)
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	if hasFrac && (mult == 1 || frac == "" || len(frac) > 9) {
		return 0, bad // fractions of a byte, "1.", or more precision than is meaningful
	}
	if whole == "" || strings.TrimLeft(whole, "0123456789") != "" || strings.TrimLeft(frac, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, bad
	}
	n *= mult
	if frac != "" {
		f, _ := strconv.ParseInt(frac, 10, 64) // at most 9 digits
		scale := int64(1)
		for range frac {
			scale *= 10
		}
		// mult <= 2^40 and f < 10^9 < 2^30: the product fits.
		n += f * mult / scale
	}
	if n <= 0 || n > 1<<62 {
		return 0, bad
	}
	return n, nil
}

var timespanUnits = []struct {
	suffix string
	d      time.Duration
}{
	{"usec", time.Microsecond}, {"us", time.Microsecond},
	{"msec", time.Millisecond}, {"ms", time.Millisecond},
	{"seconds", time.Second}, {"second", time.Second}, {"sec", time.Second}, {"s", time.Second},
	{"minutes", time.Minute}, {"minute", time.Minute}, {"min", time.Minute}, {"m", time.Minute},
	{"hours", time.Hour}, {"hour", time.Hour}, {"hr", time.Hour}, {"h", time.Hour},
	{"days", 24 * time.Hour}, {"day", 24 * time.Hour}, {"d", 24 * time.Hour},
}

// maxTimespan bounds time spans; nothing soda waits for is longer.
const maxTimespan = 10 * 365 * 24 * time.Hour

// ParseTimespan parses a systemd time span ("90", "5min", "1h 30min",
// "250ms"). A bare number means seconds.
func ParseTimespan(v string) (time.Duration, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, fmt.Errorf("empty time span")
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("%q is not a time span (examples: 30s, 5min, 1h 30min)", v)
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", v, err)
		}
		s = strings.TrimLeft(s[i:], " ")
		unit := time.Second
		for _, u := range timespanUnits {
			if strings.HasPrefix(s, u.suffix) {
				rest := s[len(u.suffix):]
				if rest == "" || rest[0] == ' ' || (rest[0] >= '0' && rest[0] <= '9') {
					unit = u.d
					s = rest
					break
				}
			}
		}
		if n > int64(maxTimespan/unit) || total > maxTimespan-time.Duration(n)*unit {
			return 0, fmt.Errorf("%q is longer than %s", v, maxTimespan)
		}
		total += time.Duration(n) * unit
		s = strings.TrimLeft(s, " ")
	}
	if total <= 0 {
		return 0, fmt.Errorf("%q: time span must be positive", v)
	}
	return total, nil
}

// SplitCommand splits a command line the way systemd splits ExecStart=:
// words separated by whitespace, double or single quotes group words, and a
// backslash escapes the next character.
func SplitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inTok bool
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\':
			if i+1 >= len(rs) {
				return nil, errors.New("trailing backslash")
			}
			i++
			cur.WriteRune(rs[i])
			inTok = true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote = r
			inTok = true
		case r == ' ' || r == '\t' || r == '\n':
			if inTok {
				words = append(words, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inTok {
		words = append(words, cur.String())
	}
	return words, nil
}

// lineIndex maps each "Section.Key" to the lines it appears on, in order.
type lineIndex struct {
	lines map[string][]int
	used  map[string]int
}

func (l *lineIndex) next(key string) int {
	i := l.used[key]
	l.used[key]++
	if i < len(l.lines[key]) {
		return l.lines[key][i]
	}
	return 0
}

// last returns the line of the key's last occurrence, the one in force.
func (l *lineIndex) last(key string) int {
	if ls := l.lines[key]; len(ls) > 0 {
		return ls[len(ls)-1]
	}
	return 0
}

// scanLines finds the line of every option and reports syntax errors with
// their line, which go-systemd's parser does not. It reads lines as that
// parser does, since that parser reads the values: a value goes on over
// the next line when its line ends in a backslash (nothing after it, not
// even a blank or a "\r"), up to a blank line; a comment goes on likewise
// (one blank allowed after the backslash); the last line, with no "\n",
// loses a final "\r"; a key's bytes that are not UTF-8 are each read as
// U+FFFD.
func scanLines(file string, data []byte) (*lineIndex, error) {
	idx := &lineIndex{lines: map[string][]int{}, used: map[string]int{}}
	section := ""
	value, comment := false, false // the line before goes on here
	lines := strings.Split(string(data), "\n")
	for i, raw := range lines {
		n := i + 1
		if n == len(lines) {
			raw = strings.TrimSuffix(raw, "\r")
		}
		line := strings.TrimSpace(raw)
		switch {
		case comment:
			comment = strings.HasSuffix(strings.TrimSuffix(raw, " "), "\\")
			continue
		case value:
			value = line != "" && strings.HasSuffix(raw, "\\")
			continue
		case line == "":
			continue
		case line[0] == '#' || line[0] == ';':
			comment = strings.HasSuffix(strings.TrimSuffix(raw, " "), "\\")
			continue
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return nil, &Error{File: file, Line: n, Err: fmt.Errorf("malformed section header %q", line)}
			}
			section = line[1 : len(line)-1]
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &Error{File: file, Line: n, Err: fmt.Errorf("expected Key=Value, got %q", line)}
		}
		if section == "" {
			return nil, &Error{File: file, Line: n, Err: fmt.Errorf("%q comes before any [Section]", line)}
		}
		key := section + "." + string([]rune(strings.TrimSpace(k)))
		idx.lines[key] = append(idx.lines[key], n)
		value = strings.TrimSpace(v) != "" && strings.HasSuffix(raw, "\\")
	}
	return idx, nil
}
