// Package mcpd is the soda-mcpd daemon: it turns a configuration into a
// bridge behind a hardened loopback listener and runs it until a signal.
package mcpd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/httpfront"
	"github.com/soda-project/soda/internal/logevent"
	"github.com/soda-project/soda/internal/mcpbridge"
	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/token"
	"github.com/soda-project/soda/internal/version"
)

const usage = `Usage:
  soda-mcpd [OPTIONS] NAME              serve /etc/soda/mcp/NAME.conf
  soda-mcpd [OPTIONS] --config FILE     serve the server described in FILE
  soda-mcpd [OPTIONS] -- COMMAND [ARG...]  bridge an ad-hoc stdio MCP server

soda-mcpd puts a stdio MCP server on a loopback MCP endpoint (Streamable HTTP
at /mcp, legacy HTTP+SSE at /sse), one child process per client session.

Options:
`

// flags holds the command line.
type flags struct {
	configFile   string
	configDir    string
	listen       string
	tokenFile    string
	noAuth       bool
	user         string
	name         string
	maxSessions  int
	idleTimeout  string
	callTimeout  string
	logLevel     string
	logFormat    string
	version      bool
	positional   []string
	adhocCommand []string
}

// flagSet returns soda-mcpd's flags, bound to f, printing their errors
// and the usage on stderr.
func (f *flags) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("soda-mcpd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.configFile, "config", "", "read the server's configuration from `FILE`")
	fs.StringVar(&f.configDir, "config-dir", serverconf.DefaultDir, "look up NAME.conf in `DIR`")
	fs.StringVar(&f.listen, "listen", "", "loopback `ADDR` to listen on (overrides Listen=; default 127.0.0.1:18100)")
	fs.StringVar(&f.tokenFile, "token-file", "", "bearer token `FILE`, created when absent (overrides TokenFile=)")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve without a bearer token (any local user can call the server)")
	fs.StringVar(&f.user, "user", "", "run the children as `USER` (overrides User=; a root soda-mcpd's default is soda-mcp)")
	fs.StringVar(&f.name, "name", "", "instance `NAME` for logs and the default token file (ad-hoc default: adhoc)")
	fs.IntVar(&f.maxSessions, "max-sessions", 0, "at most `N` live sessions (overrides MaxSessions=; default 8)")
	fs.StringVar(&f.idleTimeout, "idle-timeout", "", "end sessions idle for `SPAN` (overrides IdleTimeout=; default 15min)")
	fs.StringVar(&f.callTimeout, "call-timeout", "", "fail calls unanswered for `SPAN` (overrides CallTimeout=; default 5min)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "", "log `FORMAT`: text or json (default: text, or journald-friendly text under systemd)")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	return fs
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := f.flagSet(stderr)
	var rest []string
	for i, a := range args {
		if a == "--" {
			rest = args[i+1:]
			args = args[:i]
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.positional = fs.Args()
	f.adhocCommand = rest
	return f, nil
}

// errUsage marks command-line errors (exit status 2).
var errUsage = errors.New("usage")

// load builds the server configuration from flags and files.
func (f *flags) load() (serverconf.Server, error) {
	var (
		cfg serverconf.Server
		err error
	)
	sources := 0
	if f.configFile != "" {
		sources++
	}
	if len(f.positional) > 0 {
		sources++
	}
	if len(f.adhocCommand) > 0 {
		sources++
	}
	switch {
	case sources != 1 || len(f.positional) > 1:
		return cfg, fmt.Errorf("%w: give exactly one of NAME, --config FILE or -- COMMAND", errUsage)
	case f.configFile != "":
		cfg, err = serverconf.Load(f.configFile)
	case len(f.positional) == 1:
		if err := serverconf.ValidName(f.positional[0]); err != nil {
			return cfg, fmt.Errorf("%w: %v", errUsage, err)
		}
		cfg, err = serverconf.Load(serverconf.PathFor(f.configDir, f.positional[0]))
	default:
		name := f.name
		if name == "" {
			name = "adhoc"
		}
		if err := serverconf.ValidName(name); err != nil {
			return cfg, fmt.Errorf("%w: %v", errUsage, err)
		}
		cfg = serverconf.Defaults(name)
		cfg.Command = f.adhocCommand
	}
	if err != nil {
		return cfg, err
	}
	if f.name != "" && f.configFile != "" {
		cfg.Name = f.name
	}
	if f.listen != "" {
		cfg.Bridge.Listen = f.listen
	}
	if f.tokenFile != "" {
		cfg.Bridge.TokenFile = f.tokenFile
	}
	if f.noAuth {
		cfg.Bridge.Auth = "none"
	}
	if f.user != "" {
		cfg.User = f.user
	}
	if f.maxSessions < 0 {
		return cfg, fmt.Errorf("%w: --max-sessions must be positive", errUsage)
	}
	if f.maxSessions > 0 {
		cfg.Bridge.MaxSessions = f.maxSessions
	}
	for _, d := range []struct {
		v   string
		dst *time.Duration
		n   string
	}{{f.idleTimeout, &cfg.Bridge.IdleTimeout, "--idle-timeout"}, {f.callTimeout, &cfg.Bridge.CallTimeout, "--call-timeout"}} {
		if d.v == "" {
			continue
		}
		v, err := serverconf.ParseTimespan(d.v)
		if err != nil {
			return cfg, fmt.Errorf("%w: %s: %v", errUsage, d.n, err)
		}
		*d.dst = v
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	return cfg, nil
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "" && systemd.StderrIsJournal() {
		return slog.New(systemd.NewJournalHandler(lv)), nil
	}
	switch format {
	case "", "text":
		if format == "" && os.Getenv("JOURNAL_STREAM") != "" {
			// journald adds its own timestamps.
			opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
		}
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
}

// Main runs soda-mcpd with args (without the program name) and returns the
// exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if f.version {
		fmt.Fprintln(stdout, "soda-mcpd", version.Version)
		return 0
	}
	log, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "soda-mcpd:", strings.TrimPrefix(err.Error(), "usage: "))
		return 2
	}
	cfg, err := f.load()
	if err != nil {
		fmt.Fprintln(stderr, "soda-mcpd:", strings.TrimPrefix(err.Error(), "usage: "))
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	log = log.With("server", cfg.Name)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			log.Warn("SIGHUP: configuration reload is not supported; restart the service instead (systemctl restart keeps the socket, so waiting clients are served by the new process)")
		}
	}()
	if err := Run(ctx, log, cfg); err != nil {
		log.Error("soda-mcpd failed", "err", err)
		return 1
	}
	return 0
}

// Run serves cfg until ctx is done or a listener fails, then drains and
// stops every child; it returns the listener's error, if any, only once
// every child is gone.
// Under systemd it adopts socket-activated listeners, reports readiness and
// status with sd_notify and pings the watchdog.
func Run(ctx context.Context, log *slog.Logger, cfg serverconf.Server) error {
	notify := systemd.NewNotifier(log)
	tok, credEnv, err := preflight(log, cfg)
	if err != nil {
		return err
	}
	listeners, activated, err := openListeners(cfg)
	if err != nil {
		return err
	}
	identity, idEnv, err := childIdentity(log, cfg, os.Geteuid())
	if err != nil {
		closeListeners(listeners)
		return err
	}
	warnUnreachable(log, identity, cfg)
	placer := newPlacer(ctx, log, cfg)
	ledger := recoverChildren(ctx, log, cfg, placer)
	// Last, once every child is gone, whichever way Run returns.
	defer removeRuntimeDirs(log, ledger, cfg.Name)
	log.Info("children run supervised, without capabilities, with no_new_privs", "user", identity.String())
	spec := child.Spec{
		Argv:      cfg.Command,
		Dir:       cfg.Dir,
		Env:       append(append(idEnv, cfg.Env...), credEnv...),
		Supervise: true,
		User:      identity,
		Ledger:    ledger,
	}
	d := &daemon{log: log, cfg: cfg, notify: notify, tok: tok, listeners: listeners, activated: activated}
	if err := d.build(ctx, spec, placer); err != nil {
		closeListeners(listeners)
		return err
	}
	return d.serve(ctx)
}

// preflight checks what serving needs before any socket is opened: the
// bearer token (made when absent), the server command, and the
// credentials, which it returns as environment entries for the children.
func preflight(log *slog.Logger, cfg serverconf.Server) (tok string, credEnv []string, err error) {
	if cfg.Bridge.Auth != "none" {
		tok, err = token.Ensure(cfg.Bridge.TokenFile)
		switch {
		case errors.Is(err, token.ErrInsecure), errors.Is(err, token.ErrMalformed):
			return "", nil, fmt.Errorf("bearer token: %w", err) // the error says what to do
		case err != nil:
			return "", nil, fmt.Errorf("bearer token: %w (set TokenFile= or --token-file to a writable path)", err)
		}
	} else {
		log.Warn("authentication disabled (Auth=none): every local user and process can call this MCP server")
	}
	if _, err := exec.LookPath(cfg.Command[0]); err != nil {
		return "", nil, fmt.Errorf("server command: %w (fix ExecStart= in %s)", err, cfg.Path)
	}
	credEnv, err = credentialEnv(cfg.Credentials)
	if err != nil {
		return "", nil, err
	}
	return tok, credEnv, nil
}

// daemon is what Run serves once the configuration is checked and the
// sockets are open: the bridge, the HTTP front before it, and the
// notifier through which systemd hears of them.
type daemon struct {
	log       *slog.Logger
	cfg       serverconf.Server
	notify    *systemd.Notifier
	tok       string // the bearer token; "" with Auth=none
	listeners []net.Listener
	activated bool              // the listeners are systemd's (socket activation)
	reg       *metrics.Registry // nil when no metrics are asked for
	bridge    *mcpbridge.Bridge
	front     *httpfront.Front
}

// build makes the bridge that runs children from spec, probes it when
// ProbeInitialize= asks, and puts the HTTP front before it.
func (d *daemon) build(ctx context.Context, spec child.Spec, placer cgroup.Placer) error {
	cfg := d.cfg
	// Prometheus metrics (soda(7)): on the listener behind the token, and
	// in a textfile for node_exporter when asked.
	if cfg.Bridge.Metrics || cfg.Bridge.MetricsTextfile {
		d.reg = metrics.NewRegistry("soda-mcpd", version.Version)
	}
	bopts := mcpbridge.Options{
		Name:                 cfg.Name,
		Spec:                 spec,
		Placer:               placer,
		MaxSessions:          cfg.Bridge.MaxSessions,
		IdleTimeout:          cfg.Bridge.IdleTimeout,
		CallTimeout:          cfg.Bridge.CallTimeout,
		StartTimeout:         cfg.Bridge.StartTimeout,
		MaxBodyBytes:         cfg.Bridge.MaxBodyBytes,
		StderrLinesPerSecond: cfg.Bridge.StderrLinesPerSecond,
	}
	// Metrics off is a nil interface, not a nil *metrics.Bridge in one.
	var fm httpfront.Metrics
	if bm := metrics.NewBridge(d.reg, cfg.Name, func() (int, int) { st := d.bridge.Stats(); return st.Sessions, int(st.Children) }); bm != nil {
		bopts.Metrics, fm = bm, bm.HTTP()
	}
	d.bridge = mcpbridge.New(d.log, bopts)
	if cfg.Bridge.ProbeInitialize {
		pctx, cancel := context.WithTimeout(ctx, cfg.Bridge.StartTimeout)
		err := d.bridge.Probe(pctx)
		cancel()
		if err != nil {
			return err
		}
		d.log.Info("probe initialize answered")
	}
	fopts := httpfront.Options{
		Name:           cfg.Name,
		Token:          d.tok,
		MaxConnections: cfg.Bridge.MaxConnections,
		MaxHeaderBytes: cfg.Bridge.MaxHeaderBytes,
		ReadTimeout:    cfg.Bridge.ReadTimeout,
		Metrics:        fm,
	}
	if cfg.Bridge.Metrics {
		fopts.MetricsHandler = d.reg.Handler()
	}
	d.front = httpfront.New(d.log, fopts, d.bridge.Handler())
	return nil
}

// serve runs the bridge, serves every listener and tells systemd it is
// ready, waits for a reason to stop, then drains. It returns the failed
// listener's error, if any.
func (d *daemon) serve(ctx context.Context) error {
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	if d.cfg.Bridge.MetricsTextfile {
		stopTextfile := d.startTextfile()
		defer stopTextfile()
	}
	go d.bridge.Run(runCtx)
	serveErr := d.startServing()
	d.notify.Ready(statusLine(d.bridge.Stats(), 0))
	go d.notify.Watchdog(runCtx, func() bool { return !d.bridge.Draining() })
	idle := make(chan struct{})
	status := newStatusFile(d.log, d.cfg, d.tok != "", d.listeners, d.activated)
	defer status.remove()
	status.write(d.bridge.Stats(), 0)
	go reportStatus(runCtx, d.notify, d.bridge, d.cfg.Bridge.ExitIdle, d.activated, idle, status)
	if d.cfg.Bridge.ExitIdle > 0 && !d.activated {
		d.log.Info("ExitIdleSec= ignored: only a socket-activated service can exit when idle")
	}

	failed := d.waitStop(ctx, idle, serveErr)
	// Drain even when a listener failed: the children must not outlive
	// soda-mcpd.
	d.drain()
	d.log.Info("stopped", logevent.Stopped, "sessions_served", d.bridge.Stats().SessionsStarted)
	return failed
}

// startTextfile writes the metrics for node_exporter's textfile collector
// every TextfileInterval; the returned stop ends the writer and waits for it.
func (d *daemon) startTextfile() (stop func()) {
	stopText := make(chan struct{})
	textDone := make(chan struct{})
	go func() {
		defer close(textDone)
		if err := os.MkdirAll(metrics.TextfileDir, 0o755); err != nil {
			d.log.Warn("metrics textfile: cannot make its directory", "dir", metrics.TextfileDir, "err", err)
			return
		}
		path := metrics.TextfilePath(metrics.TextfileDir, "soda-mcp@"+d.cfg.Name)
		d.reg.TextfileLoop(path, metrics.TextfileInterval, stopText, func(err error) { d.log.Warn("metrics textfile", "path", path, "err", err) })
	}()
	return func() { close(stopText); <-textDone }
}

// startServing serves the front on every listener, each in a goroutine
// whose error comes on the returned channel, and logs where it serves.
func (d *daemon) startServing() <-chan error {
	serveErr := make(chan error, len(d.listeners))
	var urls []string
	for _, l := range d.listeners {
		go func() { serveErr <- d.front.Serve(l) }()
		urls = append(urls, listenerURL(l))
	}
	attrs := []any{logevent.Serving, "url", strings.Join(urls, " "), "command", strings.Join(d.cfg.Command, " "),
		"max_sessions", d.cfg.Bridge.MaxSessions, "auth", d.cfg.Bridge.Auth != "none", "socket_activated", d.activated}
	if d.tok != "" {
		attrs = append(attrs, "token_file", absPath(d.cfg.Bridge.TokenFile))
	}
	d.log.Info("serving", attrs...)
	return serveErr
}

// waitStop waits for a reason to stop: ctx done (a signal), no sessions
// for ExitIdleSec= (idle closed) or a listener failing, whose error it
// returns.
func (d *daemon) waitStop(ctx context.Context, idle <-chan struct{}, serveErr <-chan error) error {
	select {
	case <-ctx.Done():
	case <-idle:
		d.log.Info("exiting: no sessions", "exit_idle", d.cfg.Bridge.ExitIdle.String())
	case err := <-serveErr:
		d.log.Error("listener failed, shutting down", "err", err)
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// drain tells systemd it is stopping, lets the calls in flight end within
// DrainTimeout=, stops every child and shuts the HTTP front down.
func (d *daemon) drain() {
	d.log.Info("draining", logevent.Draining, "drain_timeout", d.cfg.Bridge.DrainTimeout.String())
	d.notify.Stopping(fmt.Sprintf("draining: %d calls in flight", d.bridge.Stats().Inflight))
	d.front.SetDraining(true)
	dctx, cancel := context.WithTimeout(context.Background(), d.cfg.Bridge.DrainTimeout)
	defer cancel()
	frontDone := make(chan error, 1)
	if d.activated {
		// Stop accepting at once: systemd keeps the socket open, so new
		// connections wait in its backlog for the next instance instead of
		// being answered 503 by this one. Requests in flight go on.
		go func() { frontDone <- d.front.Shutdown(dctx) }()
	}
	if err := d.bridge.Shutdown(dctx); err != nil {
		d.log.Warn("drain incomplete", "err", err)
	}
	if !d.activated {
		sctx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		go func() { frontDone <- d.front.Shutdown(sctx) }()
	}
	if err := <-frontDone; err != nil {
		d.front.Close()
	}
}

// openListeners adopts systemd's sockets when activated, else listens on
// the configured loopback address.
func openListeners(cfg serverconf.Server) ([]net.Listener, bool, error) {
	if systemd.Activated() {
		named, err := systemd.Listeners()
		if err != nil {
			return nil, true, fmt.Errorf("socket activation: %w", err)
		}
		var ls []net.Listener
		for _, name := range slices.Sorted(maps.Keys(named)) {
			ls = append(ls, named[name]...)
		}
		return ls, true, nil
	}
	l, err := net.Listen("tcp", cfg.Bridge.Listen)
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", cfg.Bridge.Listen, err)
	}
	return []net.Listener{l}, false, nil
}

func closeListeners(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

func listenerURL(l net.Listener) string {
	if a, ok := l.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name + ":" + mcpbridge.PathMCP
	}
	return "http://" + l.Addr().String() + mcpbridge.PathMCP
}

// credentialEnv reads the systemd credentials named in the config and
// turns them into environment entries for the children. The values never
// enter this process's own environment or its logs.
func credentialEnv(creds []serverconf.Credential) ([]string, error) {
	if len(creds) == 0 {
		return nil, nil
	}
	dir := os.Getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return nil, errors.New("Credential= is set but $CREDENTIALS_DIRECTORY is not: pass the credential with LoadCredential= in a drop-in of the service")
	}
	var env []string
	for _, c := range creds {
		path := filepath.Join(dir, c.Name)
		if c.AsPath {
			if _, err := os.Stat(path); err != nil {
				return nil, fmt.Errorf("credential %s: %w (check LoadCredential=%s:…)", c.Name, err, c.Name)
			}
			env = append(env, c.EnvVar+"="+path)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w (check LoadCredential=%s:…)", c.Name, err, c.Name)
		}
		env = append(env, c.EnvVar+"="+strings.TrimRight(string(b), "\n"))
	}
	return env, nil
}

func statusLine(st mcpbridge.Stats, callsLastMinute int64) string {
	if st.Draining {
		return fmt.Sprintf("draining: %d sessions, %d children, %d calls in flight", st.Sessions, st.Children, st.Inflight)
	}
	return fmt.Sprintf("%d sessions, %d children, %d calls in the last minute", st.Sessions, st.Children, callsLastMinute)
}

// reportStatus keeps STATUS= current and closes idle when the service has
// had no sessions for exitIdle (socket-activated services only).
func reportStatus(ctx context.Context, n *systemd.Notifier, b *mcpbridge.Bridge, exitIdle time.Duration, activated bool, idle chan struct{}, status *statusFile) {
	const tick = time.Second
	t := time.NewTicker(tick)
	defer t.Stop()
	var history []int64 // calls total, one per tick, last minute
	last := ""
	idleSince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := b.Stats()
		history = append(history, st.Calls)
		if len(history) > 61 {
			history = history[1:]
		}
		line := statusLine(st, st.Calls-history[0])
		if line != last {
			n.Status(line)
			last = line
			status.write(st, st.Calls-history[0])
		}
		if st.Sessions > 0 || st.Inflight > 0 {
			idleSince = time.Now()
		}
		if activated && exitIdle > 0 && time.Since(idleSince) >= exitIdle {
			close(idle)
			return
		}
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// newPlacer picks how children are isolated: a transient systemd scope each
// when systemd is the service manager, else a cgroup or process group.
func newPlacer(ctx context.Context, log *slog.Logger, cfg serverconf.Server) cgroup.Placer {
	limits := cgroup.Limits{
		MemoryMax: cfg.Limits.MemoryMax,
		TasksMax:  cfg.Limits.TasksMax,
		CPUWeight: uint64(cfg.Limits.CPUWeight),
		CPUQuota:  uint64(cfg.Limits.CPUQuotaPercent),
	}
	if sp, err := cgroup.NewSystemdPlacer(ctx, log, "soda-mcp-"+cfg.Name, "", limits); err == nil {
		// Its RuntimeDirectory= is writable under ProtectSystem=strict.
		sp.WithLockDir(scopesDir(cfg.Name))
		// A restart of the service (unlike a stop or a crash) does not
		// propagate to the scopes; stop what a killed predecessor left,
		// never what a live process has.
		if stopped, err := sp.SweepLeftovers(ctx); err != nil {
			log.Warn("stop child scopes left by a previous run", "stopped", stopped, "err", err)
		} else if len(stopped) > 0 {
			log.Warn("stopped child scopes left by a previous run", "stopped", stopped)
		}
		return sp
	} else {
		log.Info("no transient systemd scopes for children", "reason", err.Error())
	}
	return cgroup.NewPlacer(log, "soda-mcp-"+cfg.Name, limits)
}

// ledgerDir is where soda-mcpd keeps the records of its live children
// (see child.Ledger): a directory NAME.children in the runtime directory,
// which systemd keeps across restarts of the service
// (RuntimeDirectoryPreserve=yes) and the next boot clears, when nothing a
// record names can exist any more. Without systemd: /run/soda/mcp for
// root, $XDG_RUNTIME_DIR/soda/mcp for other users, else a directory of
// the user's in the temporary directory.
func ledgerDir(name string) string {
	base := ""
	switch {
	case os.Getenv("RUNTIME_DIRECTORY") != "":
		base = strings.Split(os.Getenv("RUNTIME_DIRECTORY"), ":")[0]
	case os.Geteuid() == 0:
		base = "/run/soda/mcp"
	case os.Getenv("XDG_RUNTIME_DIR") != "":
		base = filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "soda", "mcp")
	default:
		base = filepath.Join(os.TempDir(), fmt.Sprintf("soda-mcp-%d", os.Geteuid()))
	}
	return filepath.Join(base, name+".children")
}

// scopesDir is where soda-mcpd keeps the lock files of its children's
// scopes (cgroup.ScopePlacer.WithLockDir): NAME.scopes next to the ledger.
func scopesDir(name string) string {
	return strings.TrimSuffix(ledgerDir(name), ".children") + ".scopes"
}

// removeRuntimeDirs removes, once every child is gone, the child ledger
// and the scope locks' directory when they are empty, so that a clean
// stop leaves nothing in the runtime directory. One that still holds a
// record (a child that could not be stopped) is kept: the next start
// recovers it, and its own clean stop removes the directory.
func removeRuntimeDirs(log *slog.Logger, ledger *child.Ledger, name string) {
	if ledger != nil {
		if err := ledger.Close(); err != nil {
			log.Warn("child ledger", "err", err)
		}
	}
	if err := cgroup.RemoveLockDir(scopesDir(name)); err != nil {
		log.Warn("scope locks", "err", err)
	}
}

// recoverChildren opens the ledger of this instance's children and kills
// what a killed predecessor left (logging each group), before anything is
// served. Without a ledger soda-mcpd still runs, with a warning: the
// supervisors alone clean up after a crash.
func recoverChildren(ctx context.Context, log *slog.Logger, cfg serverconf.Server, placer cgroup.Placer) *child.Ledger {
	dir := ledgerDir(cfg.Name)
	ledger, err := child.OpenLedger(dir)
	if err != nil {
		log.Warn("no child ledger: what a crash leaves behind is not cleaned up at the next start", "dir", dir, "err", err)
		return nil
	}
	sp, _ := placer.(*cgroup.ScopePlacer)
	n, err := ledger.Recover(ctx, log, sp)
	switch {
	case err != nil:
		log.Warn("recovery of children left by a previous run incomplete", "dir", dir, "killed", n, "err", err)
	case n > 0:
		log.Warn("recovered children left by a previous run", "dir", dir, "killed", n)
	}
	return ledger
}

// RuntimeStatus is what soda-mcpd publishes in its runtime directory
// (/run/soda/mcp/NAME.status.json) for sodactl; see internal/runstate.
type RuntimeStatus = runstate.Record

// statusFile is this process's runtime record.
type statusFile struct {
	log  *slog.Logger
	path string // "" when there is no runtime directory
	base runstate.Record
}

// newStatusFile prepares the runtime record of a bridge serving cfg on
// listeners, in runstate.WriteDir: under systemd and in the foreground
// alike, so that sodactl can find a server started by hand.
func newStatusFile(log *slog.Logger, cfg serverconf.Server, auth bool, listeners []net.Listener, activated bool) *statusFile {
	s := &statusFile{log: log}
	dir, err := runstate.WriteDir()
	if err != nil || dir == "" {
		log.Debug("no runtime record", "reason", err)
		return s
	}
	s.path = filepath.Join(dir, runstate.FileName(cfg.Name))
	s.base = runstate.Record{PID: os.Getpid(), Name: cfg.Name, Auth: auth, SocketActivated: activated}
	if start, err := runstate.ProcStart(os.Getpid()); err == nil {
		s.base.Start = start
	}
	if cfg.Path != "" {
		s.base.Config = absPath(cfg.Path)
	}
	if auth {
		s.base.TokenFile = absPath(cfg.Bridge.TokenFile)
	}
	for _, l := range listeners {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			s.base.Listen = append(s.base.Listen, a.String())
		}
	}
	return s
}

func (s *statusFile) write(st mcpbridge.Stats, perMinute int64) {
	if s.path == "" {
		return
	}
	r := s.base
	r.Sessions, r.Children, r.CallsPerMinute, r.Draining, r.Updated = st.Sessions, st.Children, perMinute, st.Draining, time.Now().UTC()
	if err := runstate.Write(s.path, r); err != nil {
		s.log.Debug("write status file", "err", err)
	}
}

// remove deletes the record, unless a newer soda-mcpd of the same name
// has replaced it.
func (s *statusFile) remove() {
	if s.path == "" {
		return
	}
	if r, err := runstate.Read(s.path); err == nil && r.PID != os.Getpid() {
		return
	}
	os.Remove(s.path)
}
