// Command sodad is soda's supervisor: a system service, activated from the
// system bus as io.github.soda_project.Soda1, that owns every sandbox of the
// host behind polkit. See sodad(8) and docs/dbus-api.md.
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

	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sodad"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/version"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	var cfg sodad.Config
	fs := flag.NewFlagSet("sodad", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.ProfileDir, "profiles", profile.DefaultDir, "directory of the sandbox profiles (NAME.conf)")
	fs.StringVar(&cfg.StateDir, "state-dir", sodad.DefaultStateDir, "state directory (records and homes of the sandboxes)")
	fs.StringVar(&cfg.InitPath, "init", "", "soda-sandbox-init (default: next to sodad, else /usr/libexec/soda)")
	fs.DurationVar(&cfg.IdleExit, "idle-exit", 0, "exit after this long with no sandbox and no call (0: never)")
	fs.DurationVar(&cfg.Linger, "linger", sodad.DefaultLinger, "how long an exited sandbox's object stays on the bus")
	fs.IntVar(&cfg.MaxSandboxes, "max-sandboxes", sodad.DefaultMaxSandboxes, "live sandboxes at most")
	fs.IntVar(&cfg.MaxPerUser, "max-per-user", sodad.DefaultMaxPerUser, "live sandboxes per user at most")
	handOver := fs.Bool("hand-over", true, "keep the live sandboxes across a restart of sodad (systemd's file descriptor store)")
	verbose := fs.Bool("verbose", false, "log debug lines (each polkit check's time)")
	textfile := fs.Bool("metrics-textfile", false, "write Prometheus metrics to "+metrics.TextfilePath(metrics.TextfileDir, "sodad")+" every 5 s (node_exporter's textfile collector)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stderr, "sodad", version.Version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sodad: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *textfile {
		cfg.MetricsTextfile = metrics.TextfilePath(metrics.TextfileDir, "sodad")
	}
	level := slog.LevelInfo
	if *verbose {
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
	if *handOver {
		cfg.FDStore = systemd.NewFDStore()
		cfg.Stored = systemd.StoredFiles()
		cfg.RestartPending = func(ctx context.Context) (bool, error) { return systemd.RestartPending(ctx, os.Getpid()) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sodad.Run(ctx, cfg); err != nil {
		cfg.Log.Error("sodad failed", "err", err)
		fmt.Fprintf(stderr, "sodad: %v\n", err)
		return 1
	}
	return 0
}
