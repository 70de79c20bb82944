package profile

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/serverconf"
)

// Request is what a caller asks of a profile for one sandbox.
type Request struct {
	// MCP are the soda-mcp@NAME servers to grant; nil means every server
	// of the profile, an empty non-nil slice none.
	MCP []string
	// Allow are the egress targets to grant; nil means every target of
	// the profile, an empty non-nil slice none.
	Allow []egress.Grant
	// NoNetwork asks for no network at all; it excludes MCP and Allow.
	NoNetwork bool
	// ReadWrite and ReadOnly are host directories to grant: absolute,
	// clean, existing, no symbolic link in any component (as sodactl run
	// --rw and --ro require), each inside one of the profile's
	// directories. Unset means none: a profile's directories are where
	// grants may be, not grants themselves.
	ReadWrite, ReadOnly []string
	// Limits are the limits asked for; zero fields take the profile's
	// ceilings.
	Limits Limits
}

// Excess is one way a request goes beyond its profile.
type Excess struct {
	// Key is the profile key exceeded (MemoryMax, MCP, Allow,
	// ReadWritePaths, NoNetwork, ...).
	Key string
	// Requested is what the request asked for, as a profile would write it.
	Requested string
	// Ceiling is what the profile allows, as it is written there.
	Ceiling string
	// Message says it in a sentence.
	Message string
}

// ExceedsError lists everything by which a request exceeds its profile.
// It is the one error of Narrow a daemon may choose to override, after
// asking polkit for the "beyond the profile" action.
type ExceedsError struct {
	// Profile is the profile's name.
	Profile string
	// Excesses are in the order Narrow checks: limits, network, MCP,
	// Allow, paths.
	Excesses []Excess
}

func (e *ExceedsError) Error() string {
	msgs := make([]string, len(e.Excesses))
	for i, x := range e.Excesses {
		msgs[i] = x.Message
	}
	return strings.Join(msgs, "; ")
}

// Narrow checks req against the profile and returns the effective request:
// req with its unset fields taken from the profile and its paths resolved.
//
// A malformed request (a negative limit, an invalid MCP name or grant, a
// relative, unclean, missing or symlinked path, NoNetwork with grants) is
// a plain error naming the field. A well-formed request that goes beyond
// the profile is an *ExceedsError naming every excess and the ceiling it
// exceeds; the Request returned with it is then the effective request
// with the excesses in it, for a daemon that authorizes it beyond the
// profile. Nothing in the returned Request aliases the profile.
func (p *Profile) Narrow(req Request) (Request, error) {
	var (
		out = Request{NoNetwork: req.NoNetwork || p.NoNetwork}
		ex  []Excess
	)
	add := func(key, requested, ceiling, format string, args ...any) {
		ex = append(ex, Excess{Key: key, Requested: requested, Ceiling: ceiling, Message: fmt.Sprintf(format, args...)})
	}

	// Limits.
	var err error
	if out.Limits, err = p.narrowLimits(req.Limits, add); err != nil {
		return Request{}, err
	}

	// Network grants.
	if len(req.MCP) > maxListLen || len(req.Allow) > maxListLen || len(req.ReadWrite) > maxListLen || len(req.ReadOnly) > maxListLen {
		return Request{}, fmt.Errorf("request: more than %d entries in a list", maxListLen)
	}
	for _, m := range req.MCP {
		if err := serverconf.ValidName(m); err != nil {
			return Request{}, fmt.Errorf("request: MCP: %w", err)
		}
	}
	for _, g := range req.Allow {
		if n, err := egress.ParseGrant(g.String(), g.Private); err != nil || n != g {
			return Request{}, fmt.Errorf("request: Allow: %q is not a valid grant", g.String())
		}
	}
	if req.NoNetwork && (len(req.MCP) > 0 || len(req.Allow) > 0) {
		return Request{}, errors.New("request: NoNetwork excludes MCP and Allow")
	}
	switch {
	case out.NoNetwork:
		out.MCP, out.Allow = []string{}, []egress.Grant{}
		if p.NoNetwork {
			for _, m := range req.MCP {
				add("NoNetwork", "MCP="+m, "NoNetwork=yes", "MCP %s is refused: profile %s has NoNetwork=yes", m, p.Name)
			}
			for _, g := range req.Allow {
				add("NoNetwork", "Allow="+g.String(), "NoNetwork=yes", "Allow %s is refused: profile %s has NoNetwork=yes", grantString(g), p.Name)
			}
			if len(ex) > 0 {
				out.MCP, out.Allow = slices.Clone(req.MCP), slices.Clone(req.Allow)
				out.NoNetwork = false
			}
		}
	default:
		out.MCP = slices.Clone(p.MCP)
		if req.MCP != nil {
			out.MCP = []string{}
			for _, m := range req.MCP {
				if !slices.Contains(p.MCP, m) {
					add("MCP", m, strings.Join(p.MCP, " "), "MCP %s is not granted by profile %s (MCP=%s)", m, p.Name, strings.Join(p.MCP, " "))
				}
				if !slices.Contains(out.MCP, m) {
					out.MCP = append(out.MCP, m)
				}
			}
		}
		out.Allow = slices.Clone(p.Allow)
		if req.Allow != nil {
			out.Allow = []egress.Grant{}
			for _, g := range req.Allow {
				if !slices.ContainsFunc(p.Allow, func(pg egress.Grant) bool { return covers(pg, g) }) {
					add("Allow", grantString(g), grantList(p.Allow), "Allow %s is not granted by profile %s (%s)", grantString(g), p.Name, orNone(grantList(p.Allow)))
				}
				if !slices.Contains(out.Allow, g) {
					out.Allow = append(out.Allow, g)
				}
			}
		}
	}

	// Paths.
	rw := resolveAll(p.ReadWritePaths)
	ro := append(slices.Clone(rw), resolveAll(p.ReadOnlyPaths)...)
	for _, f := range []struct {
		key   string
		req   []string
		dst   *[]string
		dirs  []string
		shown []string
	}{
		{"ReadWritePaths", req.ReadWrite, &out.ReadWrite, rw, p.ReadWritePaths},
		{"ReadOnlyPaths", req.ReadOnly, &out.ReadOnly, ro, append(slices.Clone(p.ReadWritePaths), p.ReadOnlyPaths...)},
	} {
		for _, path := range f.req {
			r, err := resolveRequestPath(path)
			if err != nil {
				return Request{}, fmt.Errorf("request: %s: %w", f.key, err)
			}
			if !insideAny(r, f.dirs) {
				add(f.key, r, strings.Join(f.shown, " "), "%s %s is not inside profile %s's %s", f.key, r, p.Name, orNone(pathsFor(f.key, f.shown)))
			}
			if !slices.Contains(*f.dst, r) {
				*f.dst = append(*f.dst, r)
			}
		}
	}

	if len(ex) > 0 {
		return out, &ExceedsError{Profile: p.Name, Excesses: ex}
	}
	return out, nil
}

// narrowLimits fills and checks the limits.
func (p *Profile) narrowLimits(req Limits, add func(key, requested, ceiling, format string, args ...any)) (Limits, error) {
	c := p.Limits
	out := req
	sizes := []struct {
		key     string
		v       *int64
		ceiling int64
		count   bool
	}{
		{"MemoryMax", &out.MemoryMax, c.MemoryMax, false},
		{"TasksMax", &out.TasksMax, c.TasksMax, true},
		{"TmpSize", &out.TmpSize, c.TmpSize, false},
		{"HomeSize", &out.HomeSize, c.HomeSize, false},
		{"WorkspaceSize", &out.WorkspaceSize, c.WorkspaceSize, false},
	}
	for _, s := range sizes {
		format := FormatSize
		if s.count {
			format = func(n int64) string { return fmt.Sprint(n) }
		}
		switch {
		case *s.v < 0:
			return Limits{}, fmt.Errorf("request: %s %d is negative", s.key, *s.v)
		case *s.v == 0:
			*s.v = s.ceiling
		case s.ceiling > 0 && *s.v > s.ceiling:
			add(s.key, format(*s.v), format(s.ceiling), "%s %s exceeds profile %s's ceiling %s", s.key, format(*s.v), p.Name, format(s.ceiling))
		}
	}
	switch {
	case out.CPUPercent == 0:
		out.CPUPercent = c.CPUPercent
	case out.CPUPercent > maxPercent:
		return Limits{}, fmt.Errorf("request: CPUQuota %d%% is above %d%%", out.CPUPercent, maxPercent)
	case c.CPUPercent > 0 && out.CPUPercent > c.CPUPercent:
		add("CPUQuota", fmt.Sprintf("%d%%", out.CPUPercent), fmt.Sprintf("%d%%", c.CPUPercent),
			"CPUQuota %d%% exceeds profile %s's ceiling %d%%", out.CPUPercent, p.Name, c.CPUPercent)
	}
	switch {
	case out.CPUWeight == 0:
		out.CPUWeight = c.CPUWeight
	case out.CPUWeight > MaxWeight:
		return Limits{}, fmt.Errorf("request: CPUWeight %d is above %d", out.CPUWeight, MaxWeight)
	case c.CPUWeight > 0 && out.CPUWeight > c.CPUWeight:
		add("CPUWeight", fmt.Sprint(out.CPUWeight), fmt.Sprint(c.CPUWeight),
			"CPUWeight %d exceeds profile %s's ceiling %d", out.CPUWeight, p.Name, c.CPUWeight)
	}
	switch {
	case out.Timeout < 0:
		return Limits{}, fmt.Errorf("request: Timeout %s is negative", out.Timeout)
	case out.Timeout == 0:
		out.Timeout = c.Timeout
	case c.Timeout > 0 && out.Timeout > c.Timeout:
		add("Timeout", formatSpan(out.Timeout), formatSpan(c.Timeout),
			"Timeout %s exceeds profile %s's ceiling %s", formatSpan(out.Timeout), p.Name, formatSpan(c.Timeout))
	}
	return out, nil
}

// covers reports whether the profile's grant pg allows everything g does:
// the same port, the same host or one under pg's wildcard (a narrower
// wildcard included), and Private only where pg is Private.
func covers(pg, g egress.Grant) bool {
	if pg.Port != g.Port || (g.Private && !pg.Private) {
		return false
	}
	if pg.Host == g.Host {
		return true
	}
	if !strings.HasPrefix(pg.Host, ".") {
		return false
	}
	h := strings.TrimPrefix(g.Host, ".")
	return h == pg.Host[1:] && !strings.HasPrefix(g.Host, ".") || strings.HasSuffix(h, pg.Host)
}

// grantString writes a grant as a profile does, AllowPrivate ones marked.
func grantString(g egress.Grant) string {
	if g.Private {
		return g.String() + " (private)"
	}
	return g.String()
}

// grantList writes the profile's grants as its keys would.
func grantList(gs []egress.Grant) string {
	var pub, priv []string
	for _, g := range gs {
		if g.Private {
			priv = append(priv, g.String())
		} else {
			pub = append(pub, g.String())
		}
	}
	var parts []string
	if len(pub) > 0 {
		parts = append(parts, "Allow="+strings.Join(pub, " "))
	}
	if len(priv) > 0 {
		parts = append(parts, "AllowPrivate="+strings.Join(priv, " "))
	}
	return strings.Join(parts, ", ")
}

func pathsFor(key string, paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	if key == "ReadOnlyPaths" {
		return "ReadWritePaths/ReadOnlyPaths (" + strings.Join(paths, " ") + ")"
	}
	return key + " (" + strings.Join(paths, " ") + ")"
}

func orNone(s string) string {
	if s == "" {
		return "it grants none"
	}
	return s
}

// FormatSize writes a byte count as ParseBytes reads it, in the largest
// unit that divides it (4G, 1536M, 1000).
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprint(n)
}

// formatSpan writes a duration in systemd's time span syntax.
func formatSpan(d time.Duration) string {
	var parts []string
	for _, u := range []struct {
		s string
		d time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"min", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond}} {
		if d >= u.d {
			parts = append(parts, fmt.Sprintf("%d%s", d/u.d, u.s))
			d %= u.d
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

// resolveAll resolves the profile's directories (an administrator may
// name a directory through a symbolic link, /home -> /var/home); one that
// does not exist matches nothing.
func resolveAll(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil && filepath.IsAbs(r) {
			out = append(out, r)
		}
	}
	return out
}

// resolveRequestPath checks a requested path as sodactl run checks --rw
// and --ro: absolute, clean (no "..": the daemon has no working directory
// of the caller's to resolve against, the client sends absolute paths), an
// existing directory, no symbolic link in any component (a link in a
// directory the agent can write would redirect the grant anywhere), not a
// path the engine never grants (sandbox.ResolveGrant, the engine's own
// check).
func resolveRequestPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("empty path")
	case len(p) > 4096:
		return "", fmt.Errorf("path %.64q... is longer than 4096 bytes", p)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %q holds a NUL byte", p)
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("%q is not an absolute path", p)
	case filepath.Clean(p) != p || slices.Contains(strings.Split(p, "/"), ".."):
		return "", fmt.Errorf("%q is not a clean path (no //, /./, /../ or trailing /)", p)
	}
	return sandbox.ResolveGrant(p)
}

// insideAny reports whether p is one of dirs or below one.
func insideAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
