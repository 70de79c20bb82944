//go:build !soda_lean

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandboxsession"
	"github.com/soda-project/soda/internal/sandboxsession/sessionmcp"
	"github.com/soda-project/soda/internal/sodadclient"
	"github.com/soda-project/soda/internal/stdiorpc"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/version"
)

const sandboxMCPUsage = `Usage: sodactl sandbox mcp --profile NAME [OPTIONS]
       sodactl sandbox mcp --direct [OPTIONS]

A stdio MCP server of persistent sandboxes: an agent creates a sandbox (a
real OS sandbox, as sodactl run makes, kept alive) with a private
workspace, seeds it, runs commands and scripts in it again and again,
reads and writes its files, diffs it against the seeded baseline, resets
and closes it. Tools: sandbox_create, sandbox_seed, sandbox_write_files,
sandbox_read_files, sandbox_exec, sandbox_run_script, sandbox_diff,
sandbox_reset, sandbox_audit, sandbox_close (sodactl(1), SESSIONS).
Standard output is JSON-RPC only; diagnostics go to standard error. The
sandboxes end with the server, leaving nothing.

The network, limits and flags are fixed here; no tool argument widens
them. With --direct and no --allow the sandboxes have no network.

With --profile, each sandbox is sodad's, created over the system bus
under your identity within the profile NAME (its allow-list, limits and
polkit rules; sodactl sandbox profiles lists yours). With --direct, the
sandboxes run in this process, as sodactl run --direct.

Options:
  --profile NAME           sodad's profile for the sandboxes
  --direct                 run the sandboxes in this process
  --max-sandboxes N        live sandboxes at most (default 8)
  --quota SIZE             each workspace's size, enforced by the kernel
                           (default 512M)
  --idle-expiry DURATION   end a sandbox no call used for that long
                           (default 4h)
  --exec-timeout DURATION  per execution, at most (default 5m)
  --allow HOST:PORT[,...]  let the sandboxes reach HOST:PORT through the
                           egress proxy (repeatable). With --profile, the
                           profile's allow-list applies, narrowed to these
                           targets if given; with --direct, nothing else
  --memory SIZE            memory of each sandbox (default 4G)
  --tasks N                processes and threads of each sandbox (default
                           1024)
  --tmp-size SIZE          each sandbox's /tmp, /var/tmp and /dev/shm, one
                           tmpfs (default 256M)
  --home-size SIZE         each sandbox's home (default 256M). With the
                           quota, what a sandbox can write pins at most
                           1G of RAM by default, charged to its memory.
                           With --profile, both are the profile's unless
                           given
  --store-dir DIR          where the baselines' contents are kept, in
                           files without a name (default /var/tmp: disk,
                           not the server's memory)
  --allow-degraded LAYERS  run without these layers where the host lacks
                           them (e.g. cgroup), as sodactl run does
  --image REF              with --direct: each sandbox's system is the
                           image REF, as for sodactl run --image (it must
                           have bash, GNU tar and find)
  --image-store DIR        the image store of --image
  -v, --verbose            log debug lines on standard error
  -h, --help               show this help
`

// sessionOptions holds the command line of "sodactl sandbox mcp".
type sessionOptions struct {
	lim                                                 sandboxsession.Limits
	direct, verbose                                     bool
	quota, memory, tmpSize, homeSize, degraded, profile string
	allow                                               listFlag
	tasks                                               int64
	image, imageStore                                   string
}

// flagSet returns the flags of "sodactl sandbox mcp", bound to so. The
// limits take the names sodactl run gives them (--memory, --tasks); the
// names they had first, --memory-max and --tasks-max, are still accepted,
// hidden.
func (so *sessionOptions) flagSet() *flag.FlagSet {
	fs := newFlagSet("sodactl sandbox mcp")
	fs.StringVar(&so.profile, "profile", "", "")
	fs.BoolVar(&so.direct, "direct", false, "")
	fs.IntVar(&so.lim.MaxSessions, "max-sandboxes", so.lim.MaxSessions, "")
	fs.StringVar(&so.quota, "quota", "512M", "")
	fs.DurationVar(&so.lim.IdleExpiry, "idle-expiry", so.lim.IdleExpiry, "")
	fs.DurationVar(&so.lim.ExecTimeout, "exec-timeout", so.lim.ExecTimeout, "")
	fs.Var(&so.allow, "allow", "")
	fs.StringVar(&so.memory, "memory", "", "")
	fs.StringVar(&so.memory, "memory-max", "", "deprecated: use --memory")
	fs.StringVar(&so.tmpSize, "tmp-size", "256M", "")
	fs.StringVar(&so.homeSize, "home-size", "256M", "")
	fs.StringVar(&so.lim.StoreDir, "store-dir", so.lim.StoreDir, "")
	fs.Int64Var(&so.tasks, "tasks", 0, "")
	fs.Int64Var(&so.tasks, "tasks-max", 0, "deprecated: use --tasks")
	fs.StringVar(&so.degraded, "allow-degraded", "", "")
	fs.StringVar(&so.image, "image", "", "")
	fs.StringVar(&so.imageStore, "image-store", "", "")
	fs.BoolVar(&so.verbose, "verbose", false, "")
	fs.BoolVar(&so.verbose, "v", false, "")
	return fs
}

// sandboxMCPCommand implements "sodactl sandbox mcp".
func sandboxMCPCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	so := sessionOptions{lim: sandboxsession.DefaultLimits}
	fs := so.flagSet()
	pos, err := parseInterspersed(fs, args, sandboxMCPUsage, "sodactl sandbox mcp")
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("sodactl sandbox mcp", "unexpected argument %q", pos[0])
	}
	if so.direct == (so.profile != "") {
		return usagef("sodactl sandbox mcp", "give --profile NAME (sandboxes of sodad) or --direct (sandboxes in this process)")
	}
	if so.profile != "" && so.image+so.imageStore != "" {
		return usagef("sodactl sandbox mcp", "--image is for --direct; a profile's sandboxes take the profile's Image=")
	}
	tmpl, err := so.template()
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if so.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	journal := log
	if systemd.JournalAvailable() {
		journal = slog.New(systemd.NewJournalHandler(slog.LevelInfo))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	mode := "direct"
	var mgr *sandboxsession.Manager
	var closeBackend func()
	if so.profile != "" {
		mode = "sodad"
		mgr, closeBackend, err = so.sodadSessions(ctx, fs, tmpl, log, journal)
	} else {
		mgr, closeBackend, err = so.directSessions(ctx, tmpl, log, journal)
	}
	if err != nil {
		return err
	}
	defer closeBackend()
	server := sessionmcp.NewServer(mgr, mode, version.Version)
	lim := so.lim
	log.Info("sandbox MCP server ready", "backend", mode, "profile", so.profile, "max_sandboxes", lim.MaxSessions, "quota", lim.Quota,
		"tmp_size", tmpl.Limits.TmpSize, "home_size", tmpl.Limits.HomeSize, "store_dir", lim.StoreDir,
		"idle_expiry", lim.IdleExpiry, "exec_timeout", lim.ExecTimeout, "network", !tmpl.NoNetwork)
	// stdiorpc answers a malformed frame and goes on: one bad line must
	// not end every session of the server.
	err = server.Run(ctx, &stdiorpc.Transport{Reader: stdin, Writer: stdout, Log: log})
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mgr.Close(cctx)
	if err != nil && ctx.Err() == nil && err != io.EOF {
		return fmt.Errorf("sandbox MCP server: %w", err)
	}
	return nil
}

// template checks the session limits of the command line (so.lim gets
// its quota) and returns the sandbox every session starts from: its
// egress, limits and the layers it may run without. Its errors are usage
// errors.
func (so *sessionOptions) template() (sandbox.Spec, error) {
	lim := &so.lim
	var err error
	if lim.MaxSessions < 1 || lim.IdleExpiry <= 0 || lim.ExecTimeout <= 0 {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--max-sandboxes, --idle-expiry and --exec-timeout must be positive")
	}
	if lim.Quota, err = parseSize(so.quota); err != nil || lim.Quota < 1<<20 {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--quota %q: want a size of at least 1M (e.g. 512M, 2G)", so.quota)
	}
	tmpl := sandbox.Spec{NoNetwork: len(so.allow) == 0}
	for _, a := range so.allow {
		g, err := egress.ParseGrant(a, false)
		if err != nil {
			return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--allow %s: %v", a, err)
		}
		tmpl.Egress.Allow = append(tmpl.Egress.Allow, g)
	}
	if tmpl.Limits.MemoryMax, err = parseSize(so.memory); err != nil {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--memory: %v", err)
	}
	tmpl.Limits.TasksMax = so.tasks
	if tmpl.Limits.TmpSize, err = parseSize(so.tmpSize); err != nil || tmpl.Limits.TmpSize < 1<<20 {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--tmp-size %q: want a size of at least 1M", so.tmpSize)
	}
	if tmpl.Limits.HomeSize, err = parseSize(so.homeSize); err != nil || tmpl.Limits.HomeSize < 1<<20 {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--home-size %q: want a size of at least 1M", so.homeSize)
	}
	if err := checkStoreDir(lim.StoreDir); err != nil {
		return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--store-dir: %v", err)
	}
	if so.degraded != "" {
		if tmpl.AllowDegraded, err = sandbox.ParseLayers(so.degraded); err != nil {
			return sandbox.Spec{}, usagef("sodactl sandbox mcp", "--allow-degraded: %v", err)
		}
	}
	return tmpl, nil
}

// sodadSessions is the session manager whose sandboxes are sodad's, from
// so.profile, within tmpl's limits and allow-list where the command line
// gave them (fs tells which it did); done closes the bus connection.
func (so *sessionOptions) sodadSessions(ctx context.Context, fs *flag.FlagSet, tmpl sandbox.Spec, log, journal *slog.Logger) (mgr *sandboxsession.Manager, done func(), err error) {
	c, err := sodadclient.Connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if ok, err := c.Available(ctx); err != nil || !ok {
		c.Close()
		return nil, nil, fmt.Errorf("sodad is not on the system bus (%v): install or start sodad.service, or run with --direct", err)
	}
	if so.degraded != "" {
		c.Close()
		return nil, nil, usagef("sodactl sandbox mcp", "--allow-degraded is sodad's to decide (the profile), not the caller's")
	}
	// The profile's allow-list, unless --allow narrows it; no MCP
	// servers (a session runs commands, not an agent).
	spec := sodadclient.Spec{MCP: []string{}, MemoryMax: uint64(tmpl.Limits.MemoryMax), TasksMax: uint64(so.tasks)}
	// The sizes of /tmp and the home are the profile's unless given:
	// a request above its ceilings would be refused.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tmp-size":
			spec.TmpSize = uint64(tmpl.Limits.TmpSize)
		case "home-size":
			spec.HomeSize = uint64(tmpl.Limits.HomeSize)
		}
	})
	if len(so.allow) > 0 {
		spec.Allow, spec.AllowPrivate = []string{}, []string{}
		for _, g := range tmpl.Egress.Allow {
			spec.Allow = append(spec.Allow, g.String())
		}
	}
	mgr = sandboxsession.NewManager(&sandboxsession.Sodad{Client: c, Profile: so.profile, Spec: spec}, so.lim, log, journal)
	return mgr, func() { c.Close() }, nil
}

// directSessions is the session manager whose sandboxes this process
// builds, from tmpl, with an engine of its own (what killed sandboxes
// left is swept meanwhile); done closes the engine.
func (so *sessionOptions) directSessions(ctx context.Context, tmpl sandbox.Spec, log, journal *slog.Logger) (mgr *sandboxsession.Manager, done func(), err error) {
	ecfg := sandbox.Detect()
	ecfg.Log = log
	// The engine's egress records go to the session whose sandbox made
	// them; mgr is set before any sandbox starts.
	ecfg.Audit = func(r sandbox.Record) {
		if r.Event == "egress" && r.Egress != nil && mgr != nil {
			mgr.Egress(r.Sandbox, r.Egress.Target, r.Egress.Decision, r.Egress.Reason)
		}
	}
	if ecfg.InitPath, err = sandbox.FindInit(); err != nil {
		return nil, nil, err
	}
	releaseImage, err := useImage(ctx, "sodactl sandbox mcp", so.image, so.imageStore, &tmpl, os.Stderr)
	if err != nil {
		return nil, nil, err
	}
	engine, err := sandbox.New(ecfg)
	if err != nil {
		releaseImage()
		return nil, nil, err
	}
	mgr = sandboxsession.NewManager(&sandboxsession.Direct{Engine: engine, Template: tmpl}, so.lim, log, journal)
	go func() {
		if removed, err := engine.SweepLeftovers(ctx); err != nil {
			log.Warn("remove what killed sandboxes left", "removed", removed, "err", err)
		}
	}()
	return mgr, func() { engine.Close(); releaseImage() }, nil
}

// checkStoreDir checks that dir can hold the baselines: a directory where
// this process may make a file.
func checkStoreDir(dir string) error {
	f, err := os.CreateTemp(dir, ".soda-store-check-")
	if err != nil {
		return fmt.Errorf("%s cannot hold the baselines (%w): give a writable directory on disk", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
