// Package validated is the soda-validated daemon, the front of the
// worker: its command line, the sandbox engine and owner record it hands
// the worker, readiness, the watchdog and metrics, and the transport of
// the one MCP tool, validate: stdio, or Streamable HTTP (bearer token) on
// systemd's socket or a loopback --listen address.
//
// It decides nothing about a validation itself: internal/validate, the
// worker, checks a request, runs the kind's validator in a closed-network
// sandbox and writes the verdict; this package starts that worker and
// carries its calls and answers.
package validated

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/imagestore"
	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandboxsession"
	"github.com/soda-project/soda/internal/stdiorpc"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/validate"
	"github.com/soda-project/soda/internal/version"
)

const usage = `Usage: soda-validated [OPTIONS] KIND

Serve the validator of /etc/soda/validate/KIND.conf as one MCP tool,
validate, run in a closed-network sandbox, one call at a time
(soda-validated(8)). Diagnostics go to standard error.

Options:
  --config-dir DIR         the kinds' directory (default /etc/soda/validate)
  --state-dir DIR          the owner directories (default /var/lib/soda/validate)
  --reconcile              write a fresh owner record (after checking that
                           nothing of the kind runs): clears a poisoning, a
                           missing or corrupt record
  --transport stdio|http   stdio (default: stdout is JSON-RPC only), or
                           Streamable HTTP on systemd's socket or --listen
  --listen 127.0.0.1:PORT  the loopback address (http without systemd)
  --token-file FILE        the bearer token (default STATE/KIND/token, made
                           on the first start)
  --session-idle DURATION  close an HTTP session unused this long (default
                           15m; a call in progress is use)
  --allow-degraded LAYERS  run without these sandbox layers where the host
                           lacks them (e.g. cgroup: then no limits)
  --metrics-textfile       also write the Prometheus metrics every 5 s to
                           /run/soda/metrics/soda-validate@KIND.prom (for
                           node_exporter's textfile collector)
  -v, --verbose            log debug lines
  --version                print the version
`

// flags holds soda-validated's command line.
type flags struct {
	opts
	verbose, version bool
}

// flagSet returns soda-validated's flags, bound to f, printing their
// errors and the usage on stderr.
func (f *flags) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("soda-validated", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&f.dir, "config-dir", validate.DefaultDir, "")
	fs.StringVar(&f.transport, "transport", "stdio", "")
	fs.StringVar(&f.stateDir, "state-dir", validate.DefaultStateDir, "")
	fs.BoolVar(&f.reconcile, "reconcile", false, "")
	fs.StringVar(&f.listen, "listen", "", "")
	fs.StringVar(&f.tokenFile, "token-file", "", "")
	fs.StringVar(&f.degraded, "allow-degraded", "", "")
	fs.BoolVar(&f.textfile, "metrics-textfile", false, "")
	fs.DurationVar(&f.sessionIdle, "session-idle", DefaultSessionIdle, "")
	fs.BoolVar(&f.verbose, "verbose", false, "")
	fs.BoolVar(&f.verbose, "v", false, "")
	fs.BoolVar(&f.version, "version", false, "")
	return fs
}

// Main runs soda-validated with args and returns its exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return mainWith(context.Background(), newLinuxEngine, args, stdin, stdout, stderr)
}

// mainWith is Main on the sandbox engine newEngine makes, serving until
// ctx ends (or a signal comes).
func mainWith(ctx context.Context, newEngine func(*slog.Logger) (sandboxEngine, error), args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f flags
	fs := f.flagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if f.version {
		fmt.Fprintln(stdout, "soda-validated", version.Version)
		return 0
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "soda-validated: name one KIND (its configuration is DIR/KIND.conf)")
		return 2
	}
	if f.transport != "stdio" && f.transport != "http" {
		fmt.Fprintf(stderr, "soda-validated: --transport %s: stdio or http\n", f.transport)
		return 2
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o := f.opts
	o.kind = fs.Arg(0)
	if o.sessionIdle <= 0 {
		fmt.Fprintf(stderr, "soda-validated: --session-idle %s: a positive duration such as 15m\n", o.sessionIdle)
		return 2
	}
	if o.tokenFile == "" {
		o.tokenFile = validate.TokenPath(o.stateDir, o.kind)
	}
	if err := run(ctx, o, log, newEngine, stdin, stdout); err != nil {
		log.Error("soda-validated failed", "err", err)
		fmt.Fprintf(stderr, "soda-validated: %v\n", err)
		return 1
	}
	return 0
}

// opts are the command line's choices.
type opts struct {
	kind, dir, stateDir, degraded, transport, listen, tokenFile string
	reconcile, textfile                                         bool
	sessionIdle                                                 time.Duration
}

// sandboxEngine is what run uses of the sandbox engine (a *sandbox.Linux):
// the backend of the worker's sandboxes and the removal of what killed
// ones left. It is the seam through which the unit tests give run a fake
// (newLinuxEngine makes the real one).
type sandboxEngine interface {
	// Backend is the sandboxsession.Backend of sandboxes made from tmpl, their
	// homes made in homeDir.
	Backend(tmpl sandbox.Spec, homeDir string) sandboxsession.Backend
	// SweepLeftovers removes what killed sandboxes left and names it.
	SweepLeftovers(ctx context.Context) ([]string, error)
	Close() error
}

// linuxEngine is the sandbox engine of this process.
type linuxEngine struct{ *sandbox.Linux }

// Backend implements sandboxEngine: the engine's sandboxes, directly.
func (e linuxEngine) Backend(tmpl sandbox.Spec, homeDir string) sandboxsession.Backend {
	return &sandboxsession.Direct{Engine: e.Linux, Template: tmpl, HomeDir: homeDir}
}

// newLinuxEngine starts the sandbox engine of this host, its sandboxes'
// network closed.
func newLinuxEngine(log *slog.Logger) (sandboxEngine, error) {
	ecfg := sandbox.Detect()
	ecfg.Log, ecfg.ClosedNetwork = log, true
	var err error
	if ecfg.InitPath, err = sandbox.FindInit(); err != nil {
		return nil, err
	}
	e, err := sandbox.New(ecfg)
	if err != nil {
		return nil, err
	}
	return linuxEngine{e}, nil
}

// kindImage takes the kind's Image= from its store: the image must be
// there (sodactl image pull puts it), it is leased while the worker runs,
// and its root is each call's system; the kind learns its root and
// manifest digest, which the verdicts attest.
func kindImage(ctx context.Context, k *validate.Kind, tmpl *sandbox.Spec) (release func(), err error) {
	if k.Image == "" {
		return func() {}, nil
	}
	dir := k.ImageStore
	if dir == "" {
		if dir, err = imagestore.DefaultDir(os.Geteuid(), os.Getenv); err != nil {
			return nil, fmt.Errorf("Image=%s: %w", k.Image, err)
		}
	}
	s, err := imagestore.Open(ctx, dir, imagestore.Options{})
	if err != nil {
		return nil, fmt.Errorf("Image=%s: %w", k.Image, err)
	}
	im, root, release, err := s.Use(ctx, k.Image)
	if err != nil {
		return nil, fmt.Errorf("Image=%s: %w (sodactl image pull --store %s %s puts it there)", k.Image, err, dir, k.Image)
	}
	k.ImageRoot, k.ImageDigest = root, im.Digest
	tmpl.UseImage(root, k.Image, sandbox.ImageConfig{Env: im.Env, WorkingDir: im.WorkingDir})
	return release, nil
}

// run serves kind o.kind until ctx ends, a signal comes or stdin ends
// (stdio), on the engine newEngine makes.
func run(ctx context.Context, o opts, log *slog.Logger, newEngine func(*slog.Logger) (sandboxEngine, error), stdin io.Reader, stdout io.Writer) error {
	k, err := validate.LoadKind(o.dir, o.kind)
	if err != nil {
		return err
	}
	// Each call's sandbox: no network, the kind's limits, and small
	// private /tmp and home, so that all a call can write is bounded.
	tmpl := sandbox.Spec{NoNetwork: true, ReadOnly: k.ReadOnlyPaths, Env: k.Env,
		Limits: sandbox.Limits{MemoryMax: k.MemoryMax, TasksMax: k.TasksMax, CPUPercent: k.CPUPercent, TmpSize: k.TmpSize, HomeSize: k.HomeSize}}
	release, err := kindImage(ctx, k, &tmpl)
	if err != nil {
		return err
	}
	defer release()
	if o.degraded != "" {
		if tmpl.AllowDegraded, err = sandbox.ParseLayers(o.degraded); err != nil {
			return fmt.Errorf("--allow-degraded: %w", err)
		}
	}
	engine, err := newEngine(log)
	if err != nil {
		return err
	}
	defer engine.Close()
	owner, err := validate.OpenOwner(o.stateDir, k.Name, o.reconcile)
	if err != nil {
		return err
	}
	defer owner.Close()
	// Recovery before ready: what a killed predecessor left.
	if n, err := owner.Recover(); err != nil {
		return fmt.Errorf("recover %s: %w", owner, err)
	} else if n > 0 {
		log.Info("removed what a killed predecessor left", "owner", owner.String(), "count", n)
	}
	if removed, err := engine.SweepLeftovers(context.Background()); err != nil {
		log.Warn("remove what killed sandboxes left", "removed", removed, "err", err)
	}
	w, err := validate.NewWorker(k, engine.Backend(tmpl, owner.TmpDir()), owner, log)
	if err != nil {
		return err
	}
	defer func() {
		// A call in progress and its clean-up may take the deadline,
		// the run's margin and the clean-up's bound (TimeoutStopSec=).
		cctx, cancel := context.WithTimeout(context.Background(), stopWait(k))
		defer cancel()
		if err := w.Close(cctx); err != nil {
			log.Error("stop the worker", "err", err)
		}
	}()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The first call's sandbox is part of the recovery: ready means a call
	// can run at once.
	sctx, cancelSpare := context.WithTimeout(ctx, time.Minute)
	if err := w.WaitSpare(sctx); err != nil {
		log.Warn("the first sandbox did not start: each call tries again", "err", err)
	}
	cancelSpare()
	notify := systemd.NewNotifier(log)
	log.Info("validation worker ready", "kind", k.Name, "validator", k.Command[0], "transport", o.transport, "deadline", k.Deadline, "memory_max", k.MemoryMax, "tasks_max", k.TasksMax)
	server, calls := validate.NewServerCalls(w, version.Version)
	// GET /metrics behind the worker's token over HTTP, and a textfile
	// when asked (soda(7), METRICS).
	var reg *metrics.Registry
	if o.transport == "http" || o.textfile {
		reg = metrics.NewRegistry("soda-validated", version.Version)
		w.SetMetrics(metrics.NewValidator(reg, k.Name))
	}
	if o.textfile {
		path := metrics.TextfilePath(metrics.TextfileDir, "soda-validate@"+k.Name)
		if err := os.MkdirAll(metrics.TextfileDir, 0o755); err != nil {
			return fmt.Errorf("--metrics-textfile: %w", err)
		}
		stopText, textDone := make(chan struct{}), make(chan struct{})
		defer func() { close(stopText); <-textDone }()
		go func() {
			defer close(textDone)
			reg.TextfileLoop(path, metrics.TextfileInterval, stopText, func(err error) { log.Warn("metrics textfile", "path", path, "err", err) })
		}()
	}
	if o.transport == "http" {
		return serveHTTP(ctx, log, notify, server, calls, w, owner, o, reg)
	}
	notify.Ready(fmt.Sprintf("serving %s on stdio", k.Name))
	go func() {
		if err := notify.Watchdog(ctx, w.Healthy); err != nil {
			log.Warn("watchdog", "err", err)
		}
	}()
	// One bad frame is answered with a JSON-RPC error and skipped, never
	// the end of the session; frames are checked on their raw bytes
	// (UTF-8, lone surrogates, depth) before decoding, and bounded as an
	// HTTP body is.
	err = server.Run(ctx, &stdiorpc.Transport{Reader: stdin, Writer: stdout, MaxFrame: maxBodyBytes, Log: log})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// stopWait is how long stopping waits for a call in progress and its
// clean-up: the deadline, the run's margin (30 s) and the clean-up's bound
// (30 s).
func stopWait(k *validate.Kind) time.Duration { return k.Deadline + time.Minute }
