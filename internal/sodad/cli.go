package sodad

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

	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/version"
)

// Usage is what sodad --help prints.
var Usage = fmt.Sprintf(`Usage: sodad [OPTIONS]

soda's supervisor: it owns the sandboxes of this host, created from the
administrator's profiles for the callers polkit allows, holds their egress
allow-lists and audit, and answers on the system bus as
io.github.soda_project.Soda1 (docs/dbus-api.md). The bus starts it, as
sodad.service, on the first call; not for running by hand (sodad(8)).

Options:
  --profiles DIR           the sandbox profiles, NAME.conf (default
                           %s)
  --state-dir DIR          the sandboxes' records and homes (default
                           %s)
  --init PATH              soda-sandbox-init (default: next to sodad, else
                           /usr/libexec/soda/soda-sandbox-init)
  --idle-exit DURATION     exit after this long with no sandbox and no call
                           (default 0: never)
  --linger DURATION        how long an exited sandbox's object stays on the
                           bus (default %s)
  --max-sandboxes N        live sandboxes at most (default %d)
  --max-per-user N         live sandboxes per user at most (default %d)
  --hand-over=BOOL         keep the live sandboxes across a restart of sodad
                           in systemd's file descriptor store (default true)
  --metrics-textfile       write the Prometheus metrics to
                           %s every 5 s
                           (node_exporter's textfile collector)
  --verbose                log debug lines (each polkit check's time)
  --version                print the version and exit
  -h, --help               show this help
`, profile.DefaultDir, DefaultStateDir, DefaultLinger, DefaultMaxSandboxes, DefaultMaxPerUser, textfilePath)

// textfilePath is where --metrics-textfile writes.
var textfilePath = metrics.TextfilePath(metrics.TextfileDir, "sodad")

// cliFlags is sodad's command line: the Config it sets and the options
// that act in Main.
type cliFlags struct {
	cfg                                  Config
	handOver, verbose, textfile, version bool
}

// flagSet returns sodad's flags, bound to f. It prints nothing: Main
// reports the errors, and Usage describes the flags.
func (f *cliFlags) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sodad", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.cfg.ProfileDir, "profiles", profile.DefaultDir, "")
	fs.StringVar(&f.cfg.StateDir, "state-dir", DefaultStateDir, "")
	fs.StringVar(&f.cfg.InitPath, "init", "", "")
	fs.DurationVar(&f.cfg.IdleExit, "idle-exit", 0, "")
	fs.DurationVar(&f.cfg.Linger, "linger", DefaultLinger, "")
	fs.IntVar(&f.cfg.MaxSandboxes, "max-sandboxes", DefaultMaxSandboxes, "")
	fs.IntVar(&f.cfg.MaxPerUser, "max-per-user", DefaultMaxPerUser, "")
	fs.BoolVar(&f.handOver, "hand-over", true, "")
	fs.BoolVar(&f.verbose, "verbose", false, "")
	fs.BoolVar(&f.textfile, "metrics-textfile", false, "")
	fs.BoolVar(&f.version, "version", false, "")
	return fs
}

// Main runs sodad with args (without the program name) until ctx ends or
// SIGTERM or SIGINT comes, and returns its exit status: 0, 1 when sodad
// failed, 2 when the command line is wrong. --help prints Usage on
// stdout; everything else goes to stderr (the journal, under systemd).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f cliFlags
	fs := f.flagSet()
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, Usage)
		return 0
	} else if err != nil {
		fmt.Fprintf(stderr, "sodad: %v\nRun 'sodad --help' for usage.\n", err)
		return 2
	}
	if f.version {
		fmt.Fprintln(stderr, "sodad", version.Version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sodad: unexpected argument %q\nRun 'sodad --help' for usage.\n", fs.Arg(0))
		return 2
	}
	cfg := f.cfg
	if f.textfile {
		cfg.MetricsTextfile = textfilePath
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	if systemd.StderrIsJournal() {
		cfg.Log = slog.New(systemd.NewJournalHandler(level))
	} else {
		cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	}
	if systemd.JournalAvailable() {
		cfg.Journal = slog.New(systemd.NewJournalHandler(slog.LevelInfo))
	}
	if f.handOver {
		cfg.FDStore = systemd.NewFDStore()
		cfg.Stored = systemd.StoredFiles()
		cfg.RestartPending = func(ctx context.Context) (bool, error) { return systemd.RestartPending(ctx, os.Getpid()) }
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		cfg.Log.Error("sodad failed", "err", err)
		fmt.Fprintf(stderr, "sodad: %v\n", err)
		return 1
	}
	return 0
}
