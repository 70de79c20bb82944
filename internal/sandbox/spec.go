package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostcpu"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// Layer names one confinement layer. They appear in errors, in the log and
// in the audit record, and are what --allow-degraded takes.
type Layer = wire.Layer

// The layers, in the order they are applied.
const (
	LayerCgroup   = wire.LayerCgroup   // memory/pids/cpu limits, kill-all at teardown
	LayerUserNS   = wire.LayerUserNS   // user namespace (unprivileged callers)
	LayerNetNS    = wire.LayerNetNS    // network namespace with loopback only
	LayerMountNS  = wire.LayerMountNS  // private root: read-only system, hidden sockets
	LayerPIDNS    = wire.LayerPIDNS    // PID namespace with a fresh /proc
	LayerIDMap    = wire.LayerIDMap    // idmapped mounts for granted paths (root only)
	LayerLandlock = wire.LayerLandlock // filesystem access, signal and socket scopes
	LayerSeccomp  = wire.LayerSeccomp  // syscall filter
)

// Degradable lists the layers --allow-degraded may waive. The namespaces
// are not: without them nothing else holds (paths, egress, /proc).
var Degradable = []Layer{LayerCgroup, LayerLandlock, LayerSeccomp, LayerIDMap}

// ParseLayers parses a comma-separated list of degradable layer names.
func ParseLayers(s string) ([]Layer, error) {
	var out []Layer
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		l := Layer(f)
		if !slices.Contains(Degradable, l) {
			return nil, fmt.Errorf("layer %q cannot be degraded (degradable: %s)", f, joinLayers(Degradable))
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

func joinLayers(ls []Layer) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ", ")
}

// LayerError says that a layer could not be applied, so the sandbox did not
// start (fail closed).
type LayerError struct {
	Layer Layer
	Err   error
}

func (e *LayerError) Error() string {
	if slices.Contains(Degradable, e.Layer) {
		return fmt.Sprintf("sandbox layer %s cannot be applied: %v (refusing to start without it; --allow-degraded=%s runs without it)", e.Layer, e.Err, e.Layer)
	}
	return fmt.Sprintf("sandbox layer %s cannot be applied: %v (the sandbox cannot run without it)", e.Layer, e.Err)
}

func (e *LayerError) Unwrap() error { return e.Err }

// Limits are the sandbox's resource limits.
type Limits struct {
	// MemoryMax is the memory limit in bytes (cgroup memory.max).
	MemoryMax int64
	// TasksMax is the process and thread limit: the cgroup's pids.max,
	// and the sandbox user's RLIMIT_NPROC, which the kernel checks before
	// a fork copies anything, unlike the pids controller (see
	// wire.Config.NProc).
	TasksMax int64
	// CPUPercent is the CPU quota in percent of one CPU (cgroup cpu.max).
	// Default: one CPU less than the host has (at least one), so that a
	// sandbox that burns CPU leaves the host one to run on.
	CPUPercent uint64
	// CPUWeight is the sandbox cgroup's CPU weight, 1..10000 (cgroup v2
	// cpu.weight; cpu.shares on v1, as systemd maps it: weight × 1024 /
	// 100). Default 100 (DefaultCPUWeight), a service's: a lower weight
	// starves a sandbox's forks while they hold their memory-map lock,
	// which host readers of /proc then wait for (docs/sandbox.md, "Host
	// cost"); the CPU quota below the host's CPUs is what keeps a CPU the
	// host's.
	CPUWeight uint64
	// TmpSize is the size of the tmpfs that holds the private /tmp,
	// /var/tmp and /dev/shm together, in bytes.
	TmpSize int64
	// HomeSize is the size of the home's own tmpfs in bytes; its inodes
	// are limited to one per InodeBytes of it.
	HomeSize int64
	// NoFile is RLIMIT_NOFILE; FileSize RLIMIT_FSIZE in bytes (0: unlimited).
	NoFile   uint64
	FileSize uint64
}

// DefaultLimits are used for zero fields of Spec.Limits. /tmp (with
// /var/tmp and /dev/shm) and the home together pin at most 1 GiB of the
// host's memory.
var DefaultLimits = Limits{
	MemoryMax:  4 << 30,
	TasksMax:   1024,
	CPUPercent: 0, // set by Normalize: DefaultCPUPercent
	CPUWeight:  DefaultCPUWeight,
	TmpSize:    512 << 20,
	HomeSize:   512 << 20,
	NoFile:     8192,
}

// DefaultCPUWeight is a sandbox's CPU weight unless its Limits say
// otherwise: a default service's (CPUWeight=100; cpu.shares 1024 on
// cgroup v1). Measured with the host's CPUs busy, a fifth of it (20) made
// a host ps -e wait 24–42 s behind a fork bomb's starved copies; 100, at
// most 0.4 s.
const DefaultCPUWeight = 100

// DefaultCPUPercent is the CPU quota of a sandbox unless its Limits say
// otherwise, for a host of ncpu CPUs: 100 × max(1, ncpu−1) percent, one
// CPU less than the host has. A sandbox that keeps every CPU busy (a fork
// bomb, a runaway build) then still leaves the host a CPU of its own: the
// cgroup is throttled before the host's processes wait on it. It is the
// quota of all the host's sandboxes together as well (SandboxParent;
// soda-sandbox.slice, from soda-generator): hostcpu.SandboxPercent.
func DefaultCPUPercent(ncpu int) uint64 { return hostcpu.SandboxPercent(ncpu) }

// InodeBytes is how many bytes of a private tmpfs (home, /tmp) allow one
// inode: 131,072 files in 1 GiB, plenty for caches and node_modules, and
// bounded, unlike tmpfs's own default of half the host's memory pages.
const InodeBytes = wire.InodeBytes

// Spec describes a sandboxed process.
type Spec struct {
	// ID names the sandbox (scope, state directory, audit); generated when empty.
	ID string
	// Argv is the command; Argv[0] is looked up in the sandbox's PATH.
	// Empty with Persistent: the sandbox runs only what Exec asks.
	Argv []string
	// Persistent keeps the sandbox alive, its init waiting for commands
	// sent by (*Sandbox).Exec, until Close (see exec_linux.go). Argv, if set, is
	// ignored: every command is an Exec.
	Persistent bool
	// Env is the extra environment, filtered by FilterEnv; the sandbox's
	// base environment (HOME, PATH, TMPDIR, LANG, TERM, proxies) is added.
	Env []string
	// TrustedEnv is environment set by the program that starts the sandbox
	// itself (not by its user), passed unfiltered, e.g. SODA_MCP_CONFIG.
	TrustedEnv []string
	// Dir is the working directory (must be inside a granted path or the
	// sandbox home, or with RootFS a directory of the image below a
	// top-level directory it shows); empty means the first read-write
	// path, else home.
	Dir string
	// ReadOnly and ReadWrite are host paths visible in the sandbox at the
	// same place; everything else of the host is read-only system (/usr,
	// /etc, …) or hidden (/home, /root, /run, /tmp, /var/tmp, …).
	ReadOnly  []string
	ReadWrite []string
	// Hide lists more host directories to show empty (e.g. the caller's
	// home when it is not below /home). Where /home and /root really are
	// (they may be symlinks, as on Fedora Silverblue) is added by
	// Normalize.
	Hide []string
	// Home is a host directory mounted read-write as the sandbox's $HOME
	// (/home/agent). It must exist; the caller fills it (agent configs).
	Home string
	// WorkspaceSize, when not 0, gives the sandbox a private workspace at
	// SandboxWorkspace: a tmpfs of that many bytes, where a write past it
	// fails (ENOSPC). It is the default working directory then; the host
	// does not see it (Exec commands read and write it).
	WorkspaceSize int64
	// Masks are host files the sandbox sees with other contents,
	// read-only, wherever it sees them (below a grant or in the system
	// view): sodactl run --mcp-config shows the agent's configuration
	// with its host-run servers as HTTP entries, their secrets left out.
	// A path the sandbox does not see is left alone; Normalize resolves
	// symbolic links.
	Masks []Mask
	// Egress is what the sandbox may reach; see package egress.
	Egress egress.Policy
	// RootFS, if set, is a directory of the host (an unpacked image,
	// read-only) whose top level is the sandbox's system instead of the
	// host's /usr, /etc, /bin and the rest: every top-level directory
	// of it but the ones the sandbox makes itself (/proc, /sys, /dev,
	// /tmp, /run, /home, /root, /mnt, /media) is bound read-only. It
	// must be absolute and free of symbolic links.
	RootFS string
	// Image names what RootFS was unpacked from (REF@sha256:…), for
	// the audit trail's start record.
	Image string
	// Path is the command's PATH (an image's own); empty: the sandbox's
	// default, /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin.
	// Only absolute directories are kept: an empty or relative entry
	// would look commands up in the working directory, which the sandbox
	// can write.
	Path string
	// Terminate, if set, has the egress proxy terminate TLS for the
	// targets with a secret or an HTTP rule (egress.Terminator); it holds
	// the sandbox CA's key and the secrets, so it is never written
	// anywhere. The caller makes the sandbox trust the CA (a Mask of the
	// system bundle, TrustedEnv).
	Terminate *egress.Terminator `json:"-"`
	// NoNetwork closes the network: only loopback, with nothing listening
	// on it (no relay, no DNS sink, no proxy on the host, no proxy
	// variables in the environment). Egress must grant nothing.
	NoNetwork bool
	// Limits are the resource limits.
	Limits Limits
	// Timeout stops the sandbox (SIGTERM, then SIGKILL 5 s later); 0: none.
	Timeout time.Duration
	// Unprotect lists paths inside the read-write grants that stay
	// writable although the sandbox protects them (git hooks and
	// configuration, shell start-up files, ~/.ssh, …: see protect_linux.go);
	// each path and everything below it. Audited on the start record.
	Unprotect []string
	// AllowDegraded lists layers that may be skipped when unavailable.
	AllowDegraded []Layer
	// LandlockMinABI is the lowest Landlock ABI accepted (default 6:
	// filesystem, truncate, ioctl and the signal/abstract-socket scopes).
	LandlockMinABI int
	// Stdin, Stdout, Stderr are passed to the command (nil: /dev/null).
	Stdin, Stdout, Stderr *os.File
	// TTY makes Stdin the controlling terminal of the command's session
	// (a pty from OpenTerminal).
	TTY bool
	// Knobs are test switches that make a layer look unavailable.
	Knobs Knobs
}

// Knobs make layers fail on purpose, to test that the sandbox fails
// closed. They are set by tests and by SODA_SANDBOX_TEST_UNAVAILABLE
// (comma-separated layer names) in sodactl.
type Knobs struct {
	Unavailable []Layer
	// AfterCheck runs once the host has checked the granted paths and
	// before init mounts them (tests swap a path there).
	AfterCheck func()
}

func (k Knobs) unavailable(l Layer) bool { return slices.Contains(k.Unavailable, l) }

// SandboxHome is where Spec.Home appears inside the sandbox.
const SandboxHome = wire.SandboxHome

// SandboxWorkspace is where Spec.WorkspaceSize's workspace appears.
const SandboxWorkspace = wire.SandboxWorkspace

// newID makes a sandbox id (Spec.ID).
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sbx-" + hex.EncodeToString(b[:])
}

// Normalize fills defaults and checks the spec. Paths are made absolute
// and symlinks resolved, so that what is granted is what the user meant
// at launch time (the mounts are made from the resolved paths).
func (s *Spec) Normalize() error {
	if !s.Persistent && (len(s.Argv) == 0 || s.Argv[0] == "") {
		return errors.New("sandbox: no command to run")
	}
	if s.ID == "" {
		s.ID = newID()
	}
	if !validID(s.ID) {
		return fmt.Errorf("sandbox: invalid id %q (letters, digits and '-', at most 64)", s.ID)
	}
	if s.Home == "" {
		return errors.New("sandbox: no home directory")
	}
	var err error
	if s.Home, err = resolveDir(s.Home); err != nil {
		return fmt.Errorf("sandbox home: %w", err)
	}
	if s.RootFS != "" {
		r, err := resolveDir(s.RootFS)
		if err != nil {
			return fmt.Errorf("sandbox root: %w", err)
		}
		if r != s.RootFS || r == "/" {
			return fmt.Errorf("sandbox root %s: want an absolute directory other than / without symbolic links (it resolves to %s)", s.RootFS, r)
		}
	}
	for i, p := range s.ReadOnly {
		if s.ReadOnly[i], err = resolveGrant(p); err != nil {
			return fmt.Errorf("--ro %s: %w", p, err)
		}
	}
	for i, p := range s.ReadWrite {
		if s.ReadWrite[i], err = resolveGrant(p); err != nil {
			return fmt.Errorf("--rw %s: %w", p, err)
		}
	}
	var hide []string
	for _, p := range append([]string{"/home", "/root"}, s.Hide...) {
		r, err := filepath.EvalSymlinks(p)
		if err != nil || r == "/" || !filepath.IsAbs(r) {
			continue
		}
		if p != "/home" && p != "/root" || r != p {
			hide = append(hide, r)
		}
	}
	s.Hide = hide
	for i, p := range s.Unprotect {
		if s.Unprotect[i], err = resolveUnprotect(p, s.ReadWrite); err != nil {
			return fmt.Errorf("--unprotect %s: %w", p, err)
		}
	}
	for i, m := range s.Masks {
		if s.Masks[i], err = resolveMask(m); err != nil {
			return err
		}
	}
	if s.WorkspaceSize < 0 {
		return fmt.Errorf("workspace size %d: want a positive size", s.WorkspaceSize)
	}
	switch {
	case s.Dir == "" && s.WorkspaceSize > 0:
		s.Dir = SandboxWorkspace
	case s.Dir == "":
		if len(s.ReadWrite) > 0 {
			s.Dir = s.ReadWrite[0]
		} else {
			s.Dir = SandboxHome
		}
	case s.Dir == SandboxWorkspace && s.WorkspaceSize > 0, s.Dir == SandboxHome:
	case s.RootFS != "" && !insideAny(s.Dir, s.ReadWrite) && !insideAny(s.Dir, s.ReadOnly):
		d, err := imageDir(s.RootFS, s.Dir)
		if err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		s.Dir = d
	default:
		d, err := resolveDir(s.Dir)
		if err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		if !insideAny(d, s.ReadWrite) && !insideAny(d, s.ReadOnly) {
			return fmt.Errorf("working directory %s is not inside a granted path (--rw or --ro)", d)
		}
		s.Dir = d
	}
	s.Path = cleanPath(s.Path)
	l := &s.Limits
	if l.MemoryMax == 0 {
		l.MemoryMax = DefaultLimits.MemoryMax
	}
	if l.TasksMax == 0 {
		l.TasksMax = DefaultLimits.TasksMax
	}
	if l.CPUPercent == 0 {
		l.CPUPercent = DefaultCPUPercent(runtime.NumCPU())
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = DefaultLimits.CPUWeight
	}
	if l.CPUWeight > 10000 {
		return fmt.Errorf("sandbox: CPU weight %d is above 10000", l.CPUWeight)
	}
	if l.TmpSize == 0 {
		l.TmpSize = DefaultLimits.TmpSize
	}
	if l.HomeSize == 0 {
		l.HomeSize = DefaultLimits.HomeSize
	}
	if l.TmpSize < 1<<20 || l.HomeSize < 1<<20 {
		return fmt.Errorf("sandbox: /tmp (%d bytes) and home (%d bytes) need at least 1 MiB each", l.TmpSize, l.HomeSize)
	}
	if l.NoFile == 0 {
		l.NoFile = DefaultLimits.NoFile
	}
	if l.MemoryMax < 16<<20 {
		return fmt.Errorf("sandbox: memory limit %d bytes is below 16 MiB", l.MemoryMax)
	}
	if l.TasksMax < 8 {
		return fmt.Errorf("sandbox: task limit %d is below 8", l.TasksMax)
	}
	if s.LandlockMinABI == 0 {
		s.LandlockMinABI = 6
	}
	if s.Egress.ProxyPort == 0 {
		s.Egress.ProxyPort = DefaultProxyPort
	}
	return checkNoNetwork(s)
}

// DefaultProxyPort is the in-sandbox port of the CONNECT proxy.
const DefaultProxyPort = egress.DefaultProxyPort

// forbiddenGrants are host paths that may never be granted: they are the
// sandbox's own machinery or would undo its hiding of host sockets.
var forbiddenGrants = []string{"/", "/proc", "/sys", "/dev", "/run", "/var/run", "/sys/fs/cgroup", "/var/lib/soda", "/etc", "/usr", "/boot"}

// resolveGrant checks a granted path: absolute, an existing directory,
// no symbolic link in any component (a link planted by an earlier run, in
// a directory the agent could write, would otherwise redirect the grant
// anywhere), and not one of forbiddenGrants.
// ResolveGrant checks a path to be granted to a sandbox as Spec.Normalize
// does (an existing directory, no symbolic link in any component, not a
// path the engine never grants: /, /proc, /etc, …) and returns it absolute
// and clean. A daemon uses it to check a request before it starts a sandbox.
func ResolveGrant(p string) (string, error) { return resolveGrant(p) }

func resolveGrant(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if err := noSymlinks(abs); err != nil {
		return "", err
	}
	d, err := resolveDir(abs)
	if err != nil {
		return "", err
	}
	for _, f := range forbiddenGrants {
		if d == f || (f != "/" && strings.HasPrefix(d, f+"/") && (f == "/proc" || f == "/sys" || f == "/dev" || f == "/run" || f == "/var/run" || f == "/var/lib/soda")) {
			return "", fmt.Errorf("%s may not be granted to a sandbox", d)
		}
	}
	return d, nil
}

// resolveDir returns the absolute, symlink-free path of an existing directory.
func resolveDir(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	r, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", r)
	}
	return r, nil
}

// noSymlinks returns an error naming the first component of the absolute,
// clean path abs that is a symbolic link, and where it points.
func noSymlinks(abs string) error {
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(abs, "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		to, err := os.Readlink(cur)
		if err != nil {
			return err
		}
		target, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return fmt.Errorf("%s is a symbolic link to %s, and a grant may not go through a link", cur, to)
		}
		return fmt.Errorf("%s is a symbolic link to %s, and a grant may not go through a link: grant %s itself if that is what you mean", cur, to, target)
	}
	return nil
}

func insideAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// resolveUnprotect makes p absolute, with the symlinks of the part that
// exists resolved (the sandbox compares it with resolved grants); it must
// be a read-write grant (all its protection off) or inside one.
func resolveUnprotect(p string, rw []string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir, rest := abs, ""
	for {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			abs = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
	if !slices.ContainsFunc(rw, func(g string) bool { return abs == g || strings.HasPrefix(abs, g+"/") }) {
		return "", fmt.Errorf("%s is not inside a read-write grant (--rw)", abs)
	}
	return abs, nil
}

// Mask is a file shown with Data in place of its contents.
type Mask = wire.Mask

// resolveMask checks a mask: an existing regular file, its path made
// absolute without symbolic links (where the sandbox sees it), its
// contents at most wire.MaxMaskBytes.
func resolveMask(m Mask) (Mask, error) {
	p, err := filepath.Abs(m.Path)
	if err == nil {
		p, err = filepath.EvalSymlinks(p)
	}
	if err != nil {
		return Mask{}, fmt.Errorf("mask %s: %w", m.Path, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return Mask{}, fmt.Errorf("mask %s: %w", m.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return Mask{}, fmt.Errorf("mask %s: not a regular file", m.Path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return Mask{}, fmt.Errorf("mask %s: the file has %d hard links, and another name would show it unmasked: remove the others (find -samefile %s)", m.Path, st.Nlink, p)
	}
	if len(m.Data) > wire.MaxMaskBytes {
		return Mask{}, fmt.Errorf("mask %s: %d bytes, at most %d", m.Path, len(m.Data), wire.MaxMaskBytes)
	}
	return Mask{Path: p, Data: m.Data}, nil
}
