// Package generator is soda's systemd generator: it turns each
// /etc/soda/mcp/NAME.conf into a drop-in that gives soda-mcp@NAME.socket its
// loopback TCP port and, when the config asks for it, enables the socket,
// the way Podman's quadlet turns its files into units. It also gives
// soda-sandbox.slice, the system's and each user's, the CPU quota of all
// sandboxes together, which depends on the host's CPU count and so cannot
// be written in the unit file (SandboxSliceDropIn).
//
// A generator runs early at boot and on every daemon-reload; it must never
// fail the boot. A broken config is logged and skipped; two configs asking
// for the same port are both skipped with a message naming both files.
package generator

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/soda-project/soda/internal/hostcpu"
	"github.com/soda-project/soda/internal/serverconf"
)

// Logger receives one line per problem.
type Logger func(format string, args ...any)

// Options says where to read and write.
type Options struct {
	// ConfigDir holds NAME.conf files (/etc/soda/mcp).
	ConfigDir string
	// OutputDir is the generator's "normal" directory argument.
	OutputDir string
	// TemplateUnit is the path of soda-mcp@.socket, the target of
	// enablement symlinks.
	TemplateUnit string
	// ValidateDir holds the validation workers' KIND.conf files
	// (/etc/soda/validate; "": none): each with [Listener] Listen= gets
	// the listen drop-in of soda-validate@KIND.socket.
	ValidateDir string
	// NumCPU is the host's CPU count: soda-sandbox.slice gets the
	// drop-in SandboxSliceDropIn(NumCPU) (0: none).
	NumCPU int
	// SliceAdminDir is the administrator's drop-in directory of
	// soda-sandbox.slice (/etc/systemd/system/soda-sandbox.slice.d, or
	// /etc/systemd/user/... for users' managers; "": none): when a
	// drop-in there sets CPUQuota=, it wins, whatever its name, and
	// soda's is not written.
	SliceAdminDir string
	// User says the generator runs for a user's manager: it writes the
	// slice's drop-in only (the MCP bridges' and validation workers'
	// sockets are the system manager's units).
	User bool
}

// Result lists what was generated and skipped.
type Result struct {
	Generated []string // instance names
	Skipped   []string // instance names or file names
}

type instance struct {
	name string
	path string
	cfg  serverconf.Server
	port string
	// unit is the socket unit ("soda-mcp@NAME.socket" when empty).
	unit string
}

// Generate writes drop-ins for every valid config. It returns an error only
// when the output directory cannot be written; config problems are logged.
func Generate(opts Options, logf Logger) (Result, error) {
	var res Result
	if err := writeSandboxSlice(opts, logf); err != nil {
		return res, err
	}
	if opts.User {
		return res, nil
	}
	paths, err := filepath.Glob(filepath.Join(opts.ConfigDir, "*.conf"))
	if err != nil {
		return res, fmt.Errorf("list %s: %w", opts.ConfigDir, err)
	}
	sort.Strings(paths)
	var insts []instance
	for _, p := range paths {
		cfg, err := serverconf.Load(p)
		if err != nil {
			logf("skipping %s: %v", p, err)
			res.Skipped = append(res.Skipped, filepath.Base(p))
			continue
		}
		_, port, err := net.SplitHostPort(cfg.Bridge.Listen)
		if err != nil {
			logf("skipping %s: Listen=%s: %v", p, cfg.Bridge.Listen, err)
			res.Skipped = append(res.Skipped, cfg.Name)
			continue
		}
		if port == "0" {
			logf("skipping %s: Listen=%s: a socket unit needs a fixed port", p, cfg.Bridge.Listen)
			res.Skipped = append(res.Skipped, cfg.Name)
			continue
		}
		insts = append(insts, instance{name: cfg.Name, path: p, cfg: cfg, port: port})
	}
	if opts.ValidateDir != "" {
		vs, skipped := validateInstances(opts.ValidateDir, logf)
		insts = append(insts, vs...)
		res.Skipped = append(res.Skipped, skipped...)
	}
	byPort := map[string][]instance{}
	for _, in := range insts {
		byPort[in.port] = append(byPort[in.port], in)
	}
	for _, in := range insts {
		if others := byPort[in.port]; len(others) > 1 {
			var files []string
			for _, o := range others {
				files = append(files, o.path)
			}
			logf("skipping %s: port %s is also asked for by %s; give each server its own Listen= port",
				in.path, in.port, strings.Join(slices.DeleteFunc(files, func(f string) bool { return f == in.path }), ", "))
			res.Skipped = append(res.Skipped, in.name)
			continue
		}
		if err := write(opts, in); err != nil {
			return res, err
		}
		res.Generated = append(res.Generated, in.name)
	}
	return res, nil
}

func write(opts Options, in instance) error {
	unit := in.unit
	if unit == "" {
		unit = "soda-mcp@" + in.name + ".socket"
	}
	dir := filepath.Join(opts.OutputDir, unit+".d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	listen := in.cfg.Bridge.Listen
	if host, port, err := net.SplitHostPort(listen); err == nil && host == "localhost" {
		// ListenStream= takes numeric addresses only.
		listen = net.JoinHostPort("127.0.0.1", port)
	}
	body := fmt.Sprintf("# Generated by soda-generator from %s; do not edit.\n[Socket]\nListenStream=%s\n", in.path, listen)
	if err := os.WriteFile(filepath.Join(dir, "50-listen.conf"), []byte(body), 0o644); err != nil {
		return fmt.Errorf("write drop-in for %s: %w", unit, err)
	}
	if !in.cfg.Bridge.StartOnBoot {
		return nil
	}
	wants := filepath.Join(opts.OutputDir, "sockets.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", wants, err)
	}
	link := filepath.Join(wants, unit)
	if err := os.Symlink(opts.TemplateUnit, link); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("enable %s: %w", unit, err)
	}
	return nil
}

// SandboxSliceDropInName is the name of the drop-in of soda-sandbox.slice
// that soda-generator writes. It sorts before the names administrators
// give theirs (override.conf, 50-CPUQuota.conf of systemctl set-property,
// 10-cpu.conf): drop-ins apply in the order of their names, whatever
// their directory, so a later one's CPUQuota= wins.
const SandboxSliceDropInName = "00-soda-cpu-quota.conf"

// SandboxSliceDropIn is the drop-in of soda-sandbox.slice for a host of
// ncpu CPUs: a CPU quota of all sandboxes together of one CPU less than
// the host has, at least one (hostcpu.SandboxPercent), as each sandbox
// gets by default.
func SandboxSliceDropIn(ncpu int) string {
	return fmt.Sprintf(`# Generated by soda-generator for this host's %d CPUs; do not edit.
# All sandboxes together get one CPU less than the host has (at least
# one), as each sandbox does by default. To change it, set CPUQuota= in a
# drop-in of your own for soda-sandbox.slice (see soda-generator(8)).
[Slice]
CPUQuota=%d%%
`, ncpu, hostcpu.SandboxPercent(ncpu))
}

// writeSandboxSlice writes soda-sandbox.slice's drop-in, unless the
// CPU count is unknown or the administrator's drop-ins set CPUQuota=.
func writeSandboxSlice(opts Options, logf Logger) error {
	if opts.NumCPU <= 0 {
		return nil
	}
	if f := adminCPUQuota(opts.SliceAdminDir); f != "" {
		logf("soda-sandbox.slice: CPUQuota= is set in %s; not generating the sandboxes' collective quota", f)
		return nil
	}
	dir := filepath.Join(opts.OutputDir, "soda-sandbox.slice.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, SandboxSliceDropInName), []byte(SandboxSliceDropIn(opts.NumCPU)), 0o644); err != nil {
		return fmt.Errorf("write drop-in for soda-sandbox.slice: %w", err)
	}
	return nil
}

// adminCPUQuota returns the first drop-in (*.conf) in dir whose [Slice]
// section sets CPUQuota= (to anything, nothing included: a reset), or "".
func adminCPUQuota(dir string) string {
	if dir == "" {
		return ""
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	sort.Strings(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		section := ""
		for line := range strings.SplitSeq(string(b), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case line == "" || line[0] == '#' || line[0] == ';':
			case line[0] == '[':
				section = line
			case section == "[Slice]":
				if key, _, ok := strings.Cut(line, "="); ok && strings.TrimSpace(key) == "CPUQuota" {
					return p
				}
			}
		}
	}
	return ""
}
