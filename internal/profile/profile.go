// Package profile reads sandbox profiles (/etc/soda/sandbox/NAME.conf) and
// narrows sandbox requests to them.
//
// A profile is an administrator's policy for the sandboxes sodad creates:
// who may use it, what it may grant (MCP servers, host:port egress targets,
// host directories) and the ceilings of its limits. It is written in the
// same systemd INI syntax as soda's NAME.conf (see internal/serverconf):
//
//	[Profile]
//	Description=Developers: GitHub and the Jira bridge
//	Groups=developers
//	Users=alice 1001
//
//	[Grants]
//	MCP=jira github
//	Allow=api.github.com:443 *.githubusercontent.com:443
//	AllowPrivate=gitlab.internal:443
//
//	[Paths]
//	ReadWritePaths=/home /srv/work
//	ReadOnlyPaths=/srv/reference
//
//	[Limits]
//	MemoryMax=4G
//	TasksMax=512
//	CPUQuota=200%
//	CPUWeight=100
//	Timeout=8h
//	TmpSize=2G
//	HomeSize=2G
//
// A request (Request) can only narrow its profile: Narrow checks every
// limit, grant and path against it and names what exceeds it and by how
// much; fields the request leaves unset take the profile's values. Who may
// use a profile is (*Profile).Allows; whether a caller may go beyond one is
// for the daemon to ask polkit.
//
// Unlike NAME.conf, where a repeated key overrides the earlier one, a
// profile refuses a repeated single-valued key (MemoryMax= twice): a
// profile is policy, and a file that says two things says neither. List
// keys (Users=, MCP=, Allow=, ...) add up, and an empty assignment clears
// the list, as in unit files.
package profile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/serverconf"
)

// DefaultDir is where sodad looks for profiles.
const DefaultDir = "/etc/soda/sandbox"

// maxFileSize bounds a profile file; real ones are a few hundred bytes.
const maxFileSize = 1 << 20

// maxListLen bounds every list of a profile (users, groups, grants, paths).
const maxListLen = 1024

// Limits are resource limits: a profile's ceilings, or a request's values.
// Zero means unset.
type Limits struct {
	// MemoryMax is the memory limit in bytes.
	MemoryMax int64
	// TasksMax is the process and thread limit.
	TasksMax int64
	// CPUPercent is the CPU quota in percent of one CPU (systemd's
	// CPUQuota=); zero in a profile means no ceiling (all CPUs).
	CPUPercent uint64
	// CPUWeight is the sandbox cgroup's CPU weight, 1..10000 (systemd's
	// CPUWeight=); in a profile, the highest a request may ask for.
	CPUWeight uint64
	// Timeout stops the sandbox after that long; zero in a profile means
	// no ceiling.
	Timeout time.Duration
	// TmpSize is the size of the tmpfs that holds the sandbox's private
	// /tmp, /var/tmp and /dev/shm, in bytes.
	TmpSize int64
	// HomeSize is the size of the sandbox's private home in bytes.
	HomeSize int64
	// WorkspaceSize is the size of a live sandbox's private workspace
	// (sodactl sandbox mcp sessions) in bytes.
	WorkspaceSize int64
}

// DefaultLimits are a profile's ceilings for the keys it does not set:
// the sandbox engine's own defaults (sodactl run's), so that a profile
// without [Limits] grants no more than a plain sodactl run does. The CPU
// quota and the timeout have no default ceiling.
var DefaultLimits = Limits{
	MemoryMax: 4 << 30,
	TasksMax:  1024,
	CPUWeight: 100,
	TmpSize:   512 << 20,
	HomeSize:  512 << 20,
	// The sessions' default quota (issue 13).
	WorkspaceSize: 512 << 20,
}

// Profile is one parsed profile.
type Profile struct {
	// Name is the profile's name, the file's base name without ".conf".
	Name string
	// Path is the file it was read from.
	Path string
	// Description is a line for listings.
	Description string
	// Users are the user names or numeric uids that may use the profile;
	// "*" means every user.
	Users []string
	// Groups are the group names or numeric gids whose members may use it.
	Groups []string
	// MCP are the soda-mcp@NAME servers the profile may grant.
	MCP []string
	// Allow are the egress targets it may grant (Private ones from
	// AllowPrivate=).
	Allow []egress.Grant
	// NoNetwork makes every sandbox of the profile network-less; the
	// profile then grants no MCP server and no target.
	NoNetwork bool
	// PerRunMCP lets a request grant MCP servers that the caller runs
	// itself, as itself, for the one sandbox (sodactl run --mcp-config):
	// loopback ports the caller's own uid listens on.
	PerRunMCP bool
	// ReadWritePaths are host directories inside which a request may
	// grant directories read-write (and read-only).
	ReadWritePaths []string
	// ReadOnlyPaths are host directories inside which a request may grant
	// directories read-only.
	ReadOnlyPaths []string
	// Limits are the ceilings, DefaultLimits filled in.
	Limits Limits
	// Keys are the credentials its sandboxes use without holding them.
	Keys Keys
	// Image, if set, is the image (REPO@sha256:DIGEST, never a tag)
	// whose root is its sandboxes' system instead of the host's.
	Image string

	// lookupUser and lookupGroup map names to ids (os/user; tests swap
	// them).
	lookupUser, lookupGroup func(string) (uint32, bool)
}

// PathFor returns the file of the named profile in dir.
func PathFor(dir, name string) string { return filepath.Join(dir, name+".conf") }

// Load reads the profile name from dir. A name that is not a valid file
// name (serverconf.ValidName: no '/', no leading '.') is refused before any
// file is opened.
func Load(dir, name string) (*Profile, error) {
	if err := serverconf.ValidName(name); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	path := PathFor(dir, name)
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	return Parse(path, name, data)
}

// LoadAll reads every NAME.conf in dir. Broken files do not stop the
// others: the profiles that parsed are returned, sorted by name, together
// with the errors of the others (each a *serverconf.Error naming file, line
// and key, or a read error naming the file), joined with errors.Join. A
// missing dir is no profiles and no error.
func LoadAll(dir string) ([]*Profile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var (
		out  []*Profile
		errs []error
	)
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".conf")
		if !ok || e.IsDir() {
			continue
		}
		if err := serverconf.ValidName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err))
			continue
		}
		p, err := Load(dir, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// readFile reads a regular file of at most maxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// Parse parses a profile's text; file is used in error messages and as
// Path. Every error is a *serverconf.Error naming file, line and key.
func Parse(file, name string, data []byte) (*Profile, error) {
	opts, err := serverconf.ParseOptions(file, data)
	if err != nil {
		return nil, err
	}
	p := &Profile{Name: name, Path: file}
	seen := map[string]int{}
	for _, o := range opts {
		key := o.Key()
		fail := func(err error) error { return &serverconf.Error{File: file, Line: o.Line, Key: key, Err: err} }
		if single[key] {
			if first, ok := seen[key]; ok {
				return nil, fail(fmt.Errorf("set twice (first on line %d): a profile sets each value once", first))
			}
			seen[key] = o.Line
		}
		if err := p.apply(o); err != nil {
			return nil, fail(err)
		}
	}
	if p.NoNetwork && (len(p.MCP) > 0 || len(p.Allow) > 0 || p.PerRunMCP) {
		line, key := seen["Grants.NoNetwork"], "Grants.NoNetwork"
		return nil, &serverconf.Error{File: file, Line: line, Key: key, Err: errors.New("NoNetwork=yes excludes MCP=, Allow=, AllowPrivate= and PerRunMCP=yes")}
	}
	if err := p.checkKeys(); err != nil {
		return nil, &serverconf.Error{File: file, Key: "Keys", Err: err}
	}
	l := &p.Limits
	for _, f := range []struct {
		v *int64
		d int64
	}{{&l.MemoryMax, DefaultLimits.MemoryMax}, {&l.TasksMax, DefaultLimits.TasksMax}, {&l.TmpSize, DefaultLimits.TmpSize}, {&l.HomeSize, DefaultLimits.HomeSize}, {&l.WorkspaceSize, DefaultLimits.WorkspaceSize}} {
		if *f.v == 0 {
			*f.v = f.d
		}
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = DefaultLimits.CPUWeight
	}
	return p, nil
}

// single are the keys that may be set only once.
var single = map[string]bool{
	"Profile.Description": true, "Profile.Image": true, "Grants.NoNetwork": true, "Grants.PerRunMCP": true,
	"Limits.MemoryMax": true, "Limits.TasksMax": true, "Limits.CPUQuota": true, "Limits.CPUWeight": true,
	"Limits.Timeout": true, "Limits.TmpSize": true, "Limits.HomeSize": true, "Limits.WorkspaceSize": true,
	"Keys.LLMBudget": true,
}

// words splits a list value at white space and commas (sodactl's flags take
// commas, unit files white space).
func words(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
}

// addList appends the words of v to *list after check, or clears the list
// on an empty value.
func addList(list *[]string, v string, check func(string) (string, error)) error {
	if v == "" {
		*list = nil
		return nil
	}
	for _, w := range words(v) {
		c, err := check(w)
		if err != nil {
			return err
		}
		if !slices.Contains(*list, c) {
			*list = append(*list, c)
		}
	}
	if len(*list) > maxListLen {
		return fmt.Errorf("more than %d entries", maxListLen)
	}
	return nil
}

func (p *Profile) apply(o serverconf.Option) error {
	v := o.Value
	switch o.Section {
	case "Profile":
		switch o.Name {
		case "Description":
			if len(v) > 256 || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				return errors.New("a description is one line of at most 256 bytes")
			}
			p.Description = v
		case "Users":
			return addList(&p.Users, v, func(w string) (string, error) {
				if w == "*" {
					return w, nil
				}
				return w, serverconf.CheckUserName(w)
			})
		case "Groups":
			return addList(&p.Groups, v, func(w string) (string, error) { return w, serverconf.CheckUserName(w) })
		case "Image":
			if !pinnedImage(v) {
				return fmt.Errorf("%q: a profile names its image by digest, REPO@sha256:HEX (a tag could change under its sandboxes; sodactl image pull prints the digest)", v)
			}
			p.Image = v
		default:
			return errors.New("unknown key (known: Description, Users, Groups, Image)")
		}
	case "Grants":
		switch o.Name {
		case "MCP":
			return addList(&p.MCP, v, func(w string) (string, error) { return w, serverconf.ValidName(w) })
		case "Allow", "AllowPrivate":
			if v == "" {
				p.Allow = slices.DeleteFunc(p.Allow, func(g egress.Grant) bool { return g.Private == (o.Name == "AllowPrivate") })
				return nil
			}
			for _, w := range words(v) {
				g, err := egress.ParseGrant(w, o.Name == "AllowPrivate")
				if err != nil {
					return err
				}
				if !slices.Contains(p.Allow, g) {
					p.Allow = append(p.Allow, g)
				}
			}
			if len(p.Allow) > maxListLen {
				return fmt.Errorf("more than %d grants", maxListLen)
			}
		case "NoNetwork":
			b, err := serverconf.ParseBool(v)
			p.NoNetwork = b
			return err
		case "PerRunMCP":
			b, err := serverconf.ParseBool(v)
			p.PerRunMCP = b
			return err
		default:
			return errors.New("unknown key (known: MCP, Allow, AllowPrivate, NoNetwork, PerRunMCP)")
		}
	case "Paths":
		var list *[]string
		switch o.Name {
		case "ReadWritePaths":
			list = &p.ReadWritePaths
		case "ReadOnlyPaths":
			list = &p.ReadOnlyPaths
		default:
			return errors.New("unknown key (known: ReadWritePaths, ReadOnlyPaths)")
		}
		return addList(list, v, checkProfilePath)
	case "Limits":
		l := &p.Limits
		var err error
		switch o.Name {
		case "MemoryMax":
			l.MemoryMax, err = serverconf.ParseBytes(v)
		case "TmpSize":
			l.TmpSize, err = serverconf.ParseBytes(v)
		case "HomeSize":
			l.HomeSize, err = serverconf.ParseBytes(v)
		case "WorkspaceSize":
			l.WorkspaceSize, err = serverconf.ParseBytes(v)
		case "TasksMax":
			l.TasksMax, err = parseCount(v)
		case "CPUQuota":
			l.CPUPercent, err = parsePercent(v)
		case "CPUWeight":
			l.CPUWeight, err = ParseWeight(v)
		case "Timeout":
			l.Timeout, err = serverconf.ParseTimespan(v)
		default:
			return errors.New("unknown key (known: MemoryMax, TasksMax, CPUQuota, CPUWeight, Timeout, TmpSize, HomeSize, WorkspaceSize)")
		}
		return err
	case "Keys":
		return p.applyKeys(o.Name, v)
	default:
		return fmt.Errorf("unknown section [%s] (known: [Profile], [Grants], [Paths], [Limits], [Keys])", o.Section)
	}
	return nil
}

// checkProfilePath accepts an absolute, clean path without "..".
func checkProfilePath(w string) (string, error) {
	if !filepath.IsAbs(w) {
		return "", fmt.Errorf("%q is not an absolute path", w)
	}
	if filepath.Clean(w) != w || slices.Contains(strings.Split(w, "/"), "..") {
		return "", fmt.Errorf("%q is not a clean path (no //, /./, /../ or trailing /)", w)
	}
	return w, nil
}

// maxTasks bounds TasksMax= (the kernel's pid_max limit is 2^22).
const maxTasks = 1 << 22

// parseCount parses a positive task count.
func parseCount(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > maxTasks {
		return 0, fmt.Errorf("%.32q is not a number from 1 to %d", v, maxTasks)
	}
	return n, nil
}

// MaxWeight bounds CPUWeight= (cgroup v2's cpu.weight range).
const MaxWeight = 10000

// ParseWeight parses a CPU weight, 1..MaxWeight.
func ParseWeight(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 || n > MaxWeight {
		return 0, fmt.Errorf("%.32q is not a weight from 1 to %d", v, MaxWeight)
	}
	return n, nil
}

// maxPercent bounds CPUQuota= (100 % per CPU of a very large host).
const maxPercent = 100 * 4096

// parsePercent parses "200%".
func parsePercent(v string) (uint64, error) {
	s, ok := strings.CutSuffix(v, "%")
	n, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil || n == 0 || n > maxPercent {
		return 0, fmt.Errorf("%.32q is not a percentage from 1%% to %d%% (such as 50%% or 200%%)", v, maxPercent)
	}
	return n, nil
}

// Allows reports whether the user uid, member of the groups gids (primary
// and supplementary, as the bus reports them), may use the profile.
// Names in Users= and Groups= are looked up on each call, so an account
// created after the profile was read counts; a name that does not exist
// matches no one. Root gets no exception here: whether root (or anyone)
// may act beyond the profiles is polkit's decision.
func (p *Profile) Allows(uid uint32, gids []uint32) bool {
	lu, lg := p.lookupUser, p.lookupGroup
	if lu == nil {
		lu = lookupUser
	}
	if lg == nil {
		lg = lookupGroup
	}
	for _, u := range p.Users {
		if u == "*" {
			return true
		}
		if id, ok := resolveID(u, lu); ok && id == uid {
			return true
		}
	}
	for _, g := range p.Groups {
		if id, ok := resolveID(g, lg); ok && slices.Contains(gids, id) {
			return true
		}
	}
	return false
}

// resolveID reads a numeric id, or looks a name up.
func resolveID(s string, lookup func(string) (uint32, bool)) (uint32, bool) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), true
	}
	return lookup(s)
}

// pinnedImage reports whether v is REPO@sha256:HEX.
func pinnedImage(v string) bool {
	repo, digest, ok := strings.Cut(v, "@")
	hex, isSHA := strings.CutPrefix(digest, "sha256:")
	return ok && repo != "" && isSHA && len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == ""
}
