package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usage is printed for a missing or unknown subcommand.
const usage = `usage: sbxprobe battery [flags] | forkbomb N | memhog MB | orphan |
       cpuburn SECONDS | connect [--proxy ADDR] [--send LINE] TARGET |
       probe-child NAME [ARGS]`

// run dispatches a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	rest := args[1:]
	switch args[0] {
	case "battery":
		return cmdBattery(rest, stdout, stderr)
	case "forkbomb":
		return cmdForkbomb(rest, stdout, stderr)
	case "memhog":
		return cmdMemhog(rest, stdout, stderr)
	case "orphan":
		return cmdOrphan(rest, stdout, stderr)
	case orphanInner:
		return cmdOrphanInner(stdout)
	case "cpuburn":
		return cmdCPUBurn(rest, stdout, stderr)
	case "connect":
		return cmdConnect(rest, stdout, stderr)
	case "probe-child":
		return cmdProbeChild(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "sbxprobe: unknown subcommand %q\n%s\n", args[0], usage)
		return 2
	}
}

// Result is one row of the battery's output.
type Result struct {
	// Row groups related probes; the numbers follow the sandbox test plan.
	Row int `json:"row"`
	// Name identifies the probe; it is stable across runs.
	Name string `json:"name"`
	// Blocked is true when the attempt was denied.
	Blocked bool `json:"blocked"`
	// Errno names the error number that ended the attempt, if any.
	Errno string `json:"errno,omitempty"`
	// Detail says what happened, in words.
	Detail string `json:"detail"`
	// Skipped is true when the probe's input flag was not given.
	Skipped bool `json:"skipped,omitempty"`
	// Info marks rows the harness does not assert on.
	Info bool `json:"info,omitempty"`
	// Timeout is true when the probe did not finish in time.
	Timeout bool `json:"timeout,omitempty"`
	// List carries itemised findings (pids, fds, variable names).
	List []string `json:"list,omitempty"`
}

// Summary counts the rows of a battery run.
type Summary struct {
	Total      int `json:"total"`
	Blocked    int `json:"blocked"`
	NotBlocked int `json:"not_blocked"`
	Skipped    int `json:"skipped"`
	Info       int `json:"info"`
}

// Report is the single JSON object the battery prints.
type Report struct {
	Results []Result `json:"results"`
	Summary Summary  `json:"summary"`
}

// summarize counts rows: skipped rows count only as skipped, informational
// rows only as info; the rest as blocked or not blocked.
func summarize(rs []Result) Summary {
	s := Summary{Total: len(rs)}
	for _, r := range rs {
		switch {
		case r.Skipped:
			s.Skipped++
		case r.Info:
			s.Info++
		case r.Blocked:
			s.Blocked++
		default:
			s.NotBlocked++
		}
	}
	return s
}

// probe is one attempt of the battery.
type probe struct {
	row  int
	name string
	// info marks the row informational.
	info bool
	// skip, when not empty, reports the probe as skipped with this detail.
	skip string
	// run makes the attempt; Row and Name are filled in by the runner.
	run func() Result
}

// listFlag is a comma-separated, repeatable list flag.
type listFlag []string

// String implements flag.Value.
func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value; empty items are dropped.
func (l *listFlag) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// config holds the battery's flags.
type config struct {
	unix, abstract, denyConnect, plant, secretEnv listFlag
	offhostTCP, offhostUDP                        listFlag
	hostPID, hostTCP                              int
	proxy, allowConnect, workspace, hostHome      string
	resolver, dnsName                             string
	hostMachineID, hostBootID, hostCmdlineSHA     string
	hostMACs                                      listFlag
	offhostExplicit, offhostForce                 bool
	timeout                                       time.Duration
	only                                          *regexp.Regexp
}

// Defaults of the off-host targets; they are only contacted when nothing
// can leave the network namespace (see offhostGate).
var (
	defaultOffhostTCP = []string{"169.254.169.254:80", "8.8.8.8:53"}
	defaultOffhostUDP = []string{"8.8.8.8:53", "1.1.1.1:53"}
)

// parseBattery parses the battery's flags.
func parseBattery(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("battery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&c.unix, "unix", "comma-separated pathname Unix sockets on the host")
	fs.Var(&c.abstract, "abstract", "comma-separated abstract socket names (no @)")
	fs.IntVar(&c.hostPID, "host-pid", 0, "pid of a host process")
	fs.IntVar(&c.hostTCP, "host-tcp", 0, "port the host listens on at 127.0.0.1")
	fs.StringVar(&c.proxy, "proxy", "127.0.0.1:18080", "relay address")
	fs.Var(&c.denyConnect, "deny-connect", "comma-separated host:port the relay must refuse")
	fs.StringVar(&c.allowConnect, "allow-connect", "", "host:port echo target the relay must pass")
	fs.StringVar(&c.workspace, "workspace", "", "writable workspace directory")
	fs.StringVar(&c.hostHome, "host-home", "", "the invoking user's real home directory")
	fs.StringVar(&c.hostMachineID, "host-machine-id", "", "the host's /etc/machine-id")
	fs.StringVar(&c.hostBootID, "host-boot-id", "", "the host's /proc/sys/kernel/random/boot_id")
	fs.StringVar(&c.hostCmdlineSHA, "host-cmdline-sha256", "", "SHA-256 (hex) of the host's /proc/cmdline")
	fs.Var(&c.hostMACs, "host-macs", "comma-separated MAC addresses of the host's network devices")
	fs.Var(&c.plant, "plant", "comma-separated paths to try to create")
	fs.Var(&c.secretEnv, "secret-env", "comma-separated variable names that must be absent")
	fs.Var(&c.offhostTCP, "offhost-tcp", "comma-separated off-host TCP targets")
	fs.Var(&c.offhostUDP, "offhost-udp", "comma-separated off-host DNS servers (UDP)")
	fs.BoolVar(&c.offhostForce, "offhost-force", false, "contact off-host targets even when a route exists")
	fs.StringVar(&c.resolver, "resolver", "", "DNS server for the lookup probe (default: system resolver)")
	fs.StringVar(&c.dnsName, "dns-name", "secret-token.exfil.example", "name for the lookup probe")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "per-probe timeout")
	only := fs.String("only", "", "run only probes whose name matches this regexp")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "offhost-tcp" || f.Name == "offhost-udp" {
			c.offhostExplicit = true
		}
	})
	if !c.offhostExplicit {
		c.offhostTCP = defaultOffhostTCP
		c.offhostUDP = defaultOffhostUDP
	}
	if c.timeout <= 0 {
		return nil, errors.New("--timeout must be positive")
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return nil, fmt.Errorf("--only: %v", err)
		}
		c.only = re
	}
	return c, nil
}

// battery holds the state shared by the probes of one run.
type battery struct {
	cfg *config
	// fds are the file descriptors open when the battery started.
	fds []int
	// mu guards cleanups: a probe that timed out may still add one.
	mu sync.Mutex
	// cleanups run after the last probe, in reverse order.
	cleanups []func()
}

// cmdBattery runs every probe and prints the report.
func cmdBattery(args []string, stdout, stderr io.Writer) int {
	// List the inherited descriptors before the runtime opens any of its own.
	fds, fdErr := listFDs()
	cfg, err := parseBattery(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sbxprobe battery:", err)
		return 2
	}
	b := &battery{cfg: cfg, fds: fds}
	if fdErr != nil {
		b.fds = nil
	}
	results := b.run(b.probes(fdErr))
	b.mu.Lock()
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.mu.Unlock()
	return writeJSON(stdout, Report{Results: results, Summary: summarize(results)})
}

// probes lists the battery in row order.
func (b *battery) probes(fdErr error) []probe {
	var ps []probe
	ps = append(ps, b.proxyAllowProbe())      // row 0
	ps = append(ps, b.unixPathProbes()...)    // row 1
	ps = append(ps, b.hostPIDProbes()...)     // row 2
	ps = append(ps, b.abstractProbes()...)    // row 3
	ps = append(ps, socketFamilyProbes()...)  // row 4
	ps = append(ps, ioctlProbes()...)         // row 5
	ps = append(ps, b.pid1Probes()...)        // row 6
	ps = append(ps, b.procProbes()...)        // row 7
	ps = append(ps, b.signalProbes()...)      // row 8
	ps = append(ps, ioUringProbes()...)       // row 9
	ps = append(ps, b.privSyscallProbes()...) // row 10
	ps = append(ps, b.namespaceProbes()...)   // row 11
	ps = append(ps, b.execTrickProbes()...)   // row 12
	ps = append(ps, b.workspaceProbes()...)   // row 13
	ps = append(ps, b.writeExecProbes()...)   // row 14
	ps = append(ps, b.fdProbe(fdErr))         // row 15
	ps = append(ps, b.envProbes()...)         // row 16
	ps = append(ps, b.dnsProbes()...)         // row 17
	ps = append(ps, b.netProbes()...)         // row 18
	ps = append(ps, b.proxyDenyProbes()...)   // row 19
	ps = append(ps, b.bindProbes()...)        // row 20
	ps = append(ps, b.privilegeProbes()...)   // rows 21-23
	ps = append(ps, b.writeSystemProbes()...) // row 24
	ps = append(ps, b.hostIDProbes()...)      // row 25
	return ps
}

// run executes the probes one after the other, each under the timeout.
func (b *battery) run(ps []probe) []Result {
	var out []Result
	for _, p := range ps {
		if b.cfg.only != nil && !b.cfg.only.MatchString(p.name) {
			continue
		}
		out = append(out, runProbe(p, b.cfg.timeout))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Row < out[j].Row })
	return out
}

// runProbe runs one probe under a timeout and fills in its identity. A probe
// that panics or does not finish is reported as not blocked: nothing shows
// that the escape was denied.
func runProbe(p probe, timeout time.Duration) Result {
	var r Result
	if p.skip != "" {
		r = Result{Skipped: true, Detail: p.skip}
	} else {
		ch := make(chan Result, 1)
		go func() {
			defer func() {
				if v := recover(); v != nil {
					ch <- Result{Detail: fmt.Sprintf("probe panicked: %v", v)}
				}
			}()
			ch <- p.run()
		}()
		t := time.NewTimer(timeout)
		select {
		case r = <-ch:
			t.Stop()
		case <-t.C:
			r = Result{Timeout: true, Detail: fmt.Sprintf("probe did not finish within %v", timeout)}
		}
	}
	r.Row, r.Name = p.row, p.name
	if p.info {
		r.Info = true
	}
	return r
}

// writeJSON prints v as one JSON object and returns 0, or 1 on failure.
func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

// inner is the time budget for one step inside a probe, leaving the runner
// room to report it.
func (b *battery) inner() time.Duration {
	return b.cfg.timeout * 3 / 4
}

// errnoOf extracts the error number from err, if any.
func errnoOf(err error) (syscall.Errno, bool) {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e, true
	}
	return 0, false
}

// errnoName names err's error number ("EPERM"), "ETIMEDOUT" for a deadline,
// "NXDOMAIN" for a name that does not exist, or "" when err carries none.
func errnoName(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errnoOf(err); ok {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return "NXDOMAIN"
	case os.IsTimeout(err) || errors.Is(err, os.ErrDeadlineExceeded):
		return "ETIMEDOUT"
	}
	return ""
}

// bareErr strips the operation and path that os errors repeat.
func bareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// attempt reports an attempt that is blocked by any error.
func attempt(what string, err error) Result {
	if err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: fmt.Sprintf("%s: %v", what, bareErr(err))}
	}
	return Result{Detail: what + ": succeeded"}
}

// denials are the error numbers that mean "not allowed": seccomp's EPERM
// and ENOSYS, and the kernel's own permission errors.
var denials = []syscall.Errno{unix.EPERM, unix.EACCES, unix.ENOSYS}

// gated reports an attempt made with deliberately harmless arguments: it is
// blocked only when the error is one of deny (denials when empty). Any other
// error means the call got past seccomp and the permission checks and
// failed on the arguments, so the capability is there.
func gated(what string, err error, deny ...syscall.Errno) Result {
	if err == nil {
		return Result{Detail: what + ": succeeded"}
	}
	if len(deny) == 0 {
		deny = denials
	}
	e, ok := errnoOf(err)
	name := errnoName(err)
	if ok {
		for _, d := range deny {
			if e == d {
				return Result{Blocked: true, Errno: name, Detail: fmt.Sprintf("%s: %v", what, bareErr(err))}
			}
		}
	}
	return Result{Errno: name, Detail: fmt.Sprintf("%s: %v: not filtered (the kernel checked the arguments, so the call was permitted)", what, bareErr(err))}
}

// sysErr turns a raw syscall's errno into an error (nil for 0).
func sysErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// listFDs lists this process's open file descriptors with raw system calls
// (so that no Go-runtime descriptor is created on the way), leaving out the
// one used for the listing.
func listFDs() ([]int, error) {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	var fds []int
	for _, n := range names {
		var fd int
		if _, err := fmt.Sscanf(n, "%d", &fd); err == nil && fd != dfd {
			fds = append(fds, fd)
		}
	}
	sort.Ints(fds)
	return fds, nil
}

// fdProbe is row 15: blocked when only 0, 1 and 2 were inherited.
func (b *battery) fdProbe(fdErr error) probe {
	return probe{row: 15, name: "inherited-fds", run: func() Result {
		if fdErr != nil {
			return Result{Errno: errnoName(fdErr), Detail: "cannot list /proc/self/fd: " + fdErr.Error()}
		}
		var extra []string
		for _, fd := range b.fds {
			if fd <= 2 {
				continue
			}
			target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
			if err != nil {
				target = "? (" + err.Error() + ")"
			}
			extra = append(extra, fmt.Sprintf("%d -> %s", fd, target))
		}
		if len(extra) == 0 {
			return Result{Blocked: true, Detail: fmt.Sprintf("only standard descriptors open: %v", b.fds)}
		}
		return Result{Detail: fmt.Sprintf("%d extra descriptor(s) inherited: %s", len(extra), strings.Join(extra, "; ")), List: extra}
	}}
}
