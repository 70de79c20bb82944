package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/agentrun"
	"github.com/soda-project/soda/internal/auditsink"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostkeys"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/workhome"
)

const runUsage = `Usage: sodactl run [OPTIONS] -- COMMAND [ARGS...]

Run COMMAND in a sandbox: its own user, mount, PID, network, IPC and UTS
namespaces; a read-only view of the system with host sockets and homes
hidden; Landlock; a seccomp filter; a cgroup with memory, task and CPU
limits; no network but loopback. Granted MCP servers (soda-mcp@NAME) are
reachable at their usual http://127.0.0.1:PORT/mcp URL and written into
the agent's configuration (Claude Code, Codex, OpenCode) with their
tokens; granted HOST:PORT targets through the CONNECT proxy that
HTTPS_PROXY points at. Every egress attempt is audited. COMMAND's exit
status is sodactl's.

Where sodad, soda's supervisor, is on the system bus, the sandbox is
sodad's: created from an administrator's profile, with its allow-list and
audit held by sodad ('sodactl sandbox'), COMMAND's standard streams (or a
pty, on a terminal) passed to it; signals, window size changes and the exit
status travel between them. Options left out take the profile's values
(without --mcp, every server the profile grants). Otherwise, or with
--direct, sodactl builds the sandbox itself. -v logs which mode ran.

Options:
  --profile NAME           create the sandbox in sodad from profile NAME
                           (default: your only profile; 'sodactl sandbox
                           profiles' lists them); an error if sodad is not
                           on the system bus
  --direct                 build the sandbox in sodactl even if sodad runs
                           (needed for --unprotect, --audit-json,
                           --audit-json-max, --allow-degraded, --config-dir,
                           --token-file, --llm, --secret, --allow-http
                           and --image)
  --mcp NAME[,NAME...]     grant the MCP server soda-mcp@NAME (repeatable)
  --mcp-config FILE        the agent's own MCP configuration (Claude Code's
                           .mcp.json, Codex's config.toml, OpenCode's
                           opencode.json, VS Code's mcp.json): its stdio
                           servers run on the host for the run, behind
                           soda's bridge, health-checked, and are granted
                           as HTTP entries (their env stays on the host);
                           remote ones are granted their HOST:PORT
  --mcp-optional NAME      a server of --mcp-config that may fail its
                           health check: skipped instead (repeatable)
  --mcp-check WHEN         when the servers of --mcp-config are
                           health-checked: first-use (default: each starts
                           once, the agent's first session is its check,
                           a failure stops the run) or before (a probe
                           before the command starts; --mcp-optional
                           servers always are)
  --mcp-inside NAME        run this stdio server of --mcp-config inside
                           the sandbox instead, with its env (repeatable)
  --llm PROVIDER[=URL]     reach PROVIDER's model API (anthropic, openai,
                           openrouter) through a gateway on the host: the
                           sandbox gets the gateway's URL and a placeholder
                           key in the provider's variables (e.g.
                           ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY); the
                           gateway refuses any other key, adds the real
                           one (from sodactl's environment) and forwards
                           to the provider, or to URL (https; http only on
                           loopback) (repeatable; needs no --allow)
  --llm-key PROVIDER=FILE  take PROVIDER's real key from FILE (a systemd
                           credential, say) instead of its variable
  --upstream-ca FILE       trust the CA certificates in FILE (PEM) too for
                           the upstreams of --llm, --secret and
                           --allow-http (repeatable)
  --llm-budget TOKENS      refuse model requests once the run's have used
                           TOKENS tokens (input, output and cache)
  --secret NAME@HOST:PORT[,HOST:PORT...]
                           the sandbox's $NAME is a placeholder; the proxy
                           terminates TLS to those hosts (the sandbox
                           trusts a CA made for it) and puts the value of
                           NAME in sodactl's environment in its place in
                           request headers (NAME=FILE@...: the value in
                           FILE); the hosts still need --allow (repeatable)
  --allow-http 'METHOD[,METHOD...] HOST:PORT/PATH'
                           on HOST:PORT (TLS terminated, still needs
                           --allow) only requests with these methods (*:
                           any) under PATH; others get 403 (repeatable)
  --image REF              the sandbox's system is the image REF
                           (REPO:TAG, REPO@sha256:DIGEST or sha256:DIGEST)
                           from the image store instead of the host's /usr,
                           /etc, ...; read-only, shared; pulled first if
                           it is not in the store (see sodactl image)
  --image-store DIR        the image store (default /var/lib/soda/images,
                           a user's $XDG_DATA_HOME/soda/images)
  --allow HOST:PORT[,...]  grant HOST:PORT through the proxy; *.example.com:443
                           grants every subdomain (repeatable)
  --allow-private HOST:PORT
                           grant a target even if it resolves to a loopback
                           or private address (repeatable; use with care)
  --no-network             no network at all: only loopback, with nothing
                           listening (no proxy, no DNS sink); excludes
                           --mcp, --mcp-config, --allow and --allow-private
  --rw DIR                 make DIR writable in the sandbox (repeatable)
  --ro DIR                 make DIR readable in the sandbox (repeatable)
  --unprotect PATH         leave PATH (inside a --rw DIR) writable although
                           it is protected (.git/hooks, .git/config, shell
                           start-up files, ~/.ssh, ...); logged and audited
  -C, --workdir DIR        working directory (default: the first --rw DIR)
  --env NAME[=VALUE]       pass a variable (NAME alone: take its value from
                           sodactl's environment); loader, proxy and
                           code-injecting variables are refused (repeatable)
  --memory SIZE            memory limit, e.g. 2G (default 4G)
  --tasks N                process and thread limit (default 1024)
  --cpu PCT                CPU limit in percent of one CPU (default: one
                           CPU less than the host has, at least 100)
  --cpu-weight N           CPU weight, 1..10000, against the host's
                           services' 100 (default 100, a service's)
  --tmp-size SIZE          size of the private /tmp, /var/tmp and /dev/shm
                           together, in RAM (default 512M)
  --home-size SIZE         size of the private home, in RAM (default 512M)
  --timeout DURATION       stop COMMAND after DURATION (SIGTERM, then SIGKILL)
  --audit-json FILE        append the audit record (JSON lines) to FILE,
                           which must be outside every grant
  --audit-json-max SIZE    stop adding egress records to FILE once it grew
                           by SIZE (default 64M); a summary says how many
  --allow-degraded LAYERS  run even if these layers are unavailable
                           (cgroup, landlock, seccomp, idmap); logged and
                           audited. Without it a missing layer is an error.
  --config-dir DIR         directory holding NAME.conf (default /etc/soda/mcp);
                           a NAME without one is granted if a soda-mcpd of
                           that name runs (its /run/soda/mcp/NAME.status.json)
  --runtime-dir DIR        look for those runtime records in DIR only
                           (default /run/soda/mcp, and
                           $XDG_RUNTIME_DIR/soda/mcp for a user)
  --token-file FILE        with one --mcp server, read its token from FILE
                           instead of the configured one
  -v, --verbose            log each layer and egress decision
  -h, --help               show this help

Exit status: COMMAND's; 125 if sodactl run itself failed: a wrong option,
an invalid grant, a granted server that is neither configured nor running,
an --mcp-config server that failed its health check,
or a sandbox layer that could not be set up (the error names it), or,
through sodad, sodad refused the sandbox, is absent although --profile was
given, or lost the sandbox; 126/127 if COMMAND cannot be run or found.
`

// exitSandbox is sodactl run's exit status whenever it fails before
// COMMAND runs, the command line included (as env(1) and timeout(1) do), so
// that it never mixes with COMMAND's own statuses; 126 and 127 (command not
// executable, not found) come from sandbox.CommandError.
const exitSandbox = 125

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// repeatFlag collects a repeatable flag whose values may hold commas.
type repeatFlag []string

func (r *repeatFlag) String() string { return strings.Join(*r, " ") }

func (r *repeatFlag) Set(v string) error { *r = append(*r, v); return nil }

type runOptions struct {
	mcp, allow, allowPrivate  listFlag
	rw, ro, env, unprotect    repeatFlag
	workdir                   string
	memory, tmpSize, homeSize string
	tasks                     int64
	cpu, cpuWeight            uint64
	timeout                   time.Duration
	auditJSON, auditMaxS      string
	auditMax                  int64
	degraded                  string
	verbose, noNetwork        bool
	profile                   string // sodad's profile
	mcpConfig                 string // the agent's own MCP configuration
	mcpInside, mcpOptional    listFlag
	mcpCheck                  string     // when the agent's own servers are checked: first-use or before
	direct                    bool       // build the sandbox in sodactl, not sodad
	llm, llmKey, upstreamCA   repeatFlag // the model gateway
	llmBudget                 string
	secret, allowHTTP         repeatFlag // TLS terminated by the proxy
	image, imageStore         string     // the sandbox's system from an image
}

// flagSet returns the flags of "sodactl run", bound to ro and, for the
// options every command shares, to opts.
func (ro *runOptions) flagSet(opts *options) *flag.FlagSet {
	fs := sharedFlags(opts, "sodactl run")
	fs.Var(&ro.mcp, "mcp", "")
	fs.StringVar(&ro.mcpConfig, "mcp-config", "", "")
	fs.Var(&ro.mcpInside, "mcp-inside", "")
	fs.Var(&ro.mcpOptional, "mcp-optional", "")
	fs.StringVar(&ro.mcpCheck, "mcp-check", "first-use", "")
	fs.Var(&ro.allow, "allow", "")
	fs.Var(&ro.allowPrivate, "allow-private", "")
	fs.Var(&ro.rw, "rw", "")
	fs.Var(&ro.ro, "ro", "")
	fs.Var(&ro.unprotect, "unprotect", "")
	fs.Var(&ro.env, "env", "")
	fs.StringVar(&ro.workdir, "workdir", "", "")
	fs.StringVar(&ro.workdir, "C", "", "")
	fs.StringVar(&ro.memory, "memory", "", "")
	fs.StringVar(&ro.tmpSize, "tmp-size", "", "")
	fs.StringVar(&ro.homeSize, "home-size", "", "")
	fs.Int64Var(&ro.tasks, "tasks", 0, "")
	fs.Uint64Var(&ro.cpu, "cpu", 0, "")
	fs.Uint64Var(&ro.cpuWeight, "cpu-weight", 0, "")
	fs.DurationVar(&ro.timeout, "timeout", 0, "")
	fs.StringVar(&ro.auditJSON, "audit-json", "", "")
	fs.StringVar(&ro.auditMaxS, "audit-json-max", "", "")
	fs.StringVar(&ro.degraded, "allow-degraded", "", "")
	fs.BoolVar(&ro.noNetwork, "no-network", false, "")
	fs.BoolVar(&ro.verbose, "verbose", false, "")
	fs.BoolVar(&ro.verbose, "v", false, "")
	fs.StringVar(&ro.profile, "profile", "", "")
	fs.BoolVar(&ro.direct, "direct", false, "")
	fs.Var(&ro.llm, "llm", "")
	fs.Var(&ro.llmKey, "llm-key", "")
	fs.Var(&ro.upstreamCA, "upstream-ca", "")
	fs.StringVar(&ro.llmBudget, "llm-budget", "", "")
	fs.Var(&ro.secret, "secret", "")
	fs.Var(&ro.allowHTTP, "allow-http", "")
	fs.StringVar(&ro.image, "image", "", "")
	fs.StringVar(&ro.imageStore, "image-store", "", "")
	return fs
}

// fullOnly names the first of ro's flags that only the full sodactl
// serves (see handoff.go), or "".
func (ro *runOptions) fullOnly() string {
	if ro.image != "" || ro.imageStore != "" {
		return "--image"
	}
	return ""
}

// runCommand implements "sodactl run"; it returns the exit code.
func runCommand(opts *options, args []string, stdout, stderr io.Writer) (int, error) {
	var ro runOptions
	fs := ro.flagSet(opts)
	if err := parse(fs, args, runUsage, "sodactl run"); err != nil {
		return exitSandbox, err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return exitSandbox, usagef("sodactl run", "missing COMMAND (sodactl run [OPTIONS] -- COMMAND [ARGS...])")
	}
	if f := ro.fullOnly(); leanBuild && f != "" {
		return exitSandbox, &handOff{what: "sodactl run " + f, run: true}
	}

	level := slog.LevelWarn
	if ro.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	spec, err := ro.spec(argv, stdout, stderr)
	if err != nil {
		return exitSandbox, err
	}
	perrunConfig, err := loadPerRun(&ro)
	if err != nil {
		return exitSandbox, err
	}
	keys, err := loadKeys(&ro, os.LookupEnv)
	if err != nil {
		return exitSandbox, err
	}
	if ro.profile != "" {
		if err := serverconf.ValidName(ro.profile); err != nil {
			return exitSandbox, usagef("sodactl run", "--profile: %v", err)
		}
	}
	// Through sodad when it is there, unless --direct.
	ctx := context.Background()
	client, err := chooseMode(ctx, opts, &ro, log)
	if err != nil {
		return exitSandbox, err
	}
	if client != nil {
		if keys != nil || ro.image != "" {
			client.Close()
			return exitSandbox, usagef("sodactl run", "--llm, --secret, --allow-http and --image are not available through sodad yet (--profile %s); add --direct", ro.profile)
		}
		return runViaSodad(ctx, client, opts, &ro, spec, perrunConfig, stdout, stderr, log)
	}
	return runDirect(ctx, opts, &ro, spec, perrunConfig, keys, stderr, log)
}

// runDirect builds the sandbox in sodactl: the granted servers and the
// agent's own (--mcp-config, on the host for this run) go into the
// recipe (agentrun) with the command line's sandbox, in a private home
// that is removed once the command has ended.
func runDirect(ctx context.Context, opts *options, ro *runOptions, spec sandbox.Spec, pc *perRunConfig, kc *hostkeys.Config, stderr io.Writer, log *slog.Logger) (int, error) {
	servers, err := mcpGrants(opts, ro.mcp)
	if err != nil {
		return exitSandbox, err
	}
	perrun, err := pc.start(ctx, log, stderr)
	if err != nil {
		return exitSandbox, err
	}
	defer perrun.close()
	perrun.apply(&spec)
	releaseImage, err := runImage(ctx, ro, &spec, stderr)
	if err != nil {
		return exitSandbox, err
	}
	defer releaseImage()
	keys, err := keysFor(kc, &spec, log)
	if err != nil {
		return exitSandbox, err
	}
	defer keys.Close()
	if kc != nil && len(kc.LLM) > 0 {
		defer func() {
			u := keys.Usage()
			fmt.Fprintf(stderr, "sodactl: model usage: %d input, %d output tokens (%d cache read, %d cache write)\n", u.Input, u.Output, u.CacheRead, u.CacheWrite)
		}()
	}

	homes, err := workhome.Open(workhome.StateDir(os.Geteuid(), os.Getenv), os.Geteuid())
	if err != nil {
		return exitSandbox, err
	}
	homes.Sweep(log)
	spec, home, err := agentrun.Build(homes, agentrun.Recipe{Sandbox: spec, Servers: slices.Concat(servers, perrun.grants())})
	if err != nil {
		return exitSandbox, err
	}
	defer func() {
		if err := home.Remove(); err != nil {
			log.Warn("remove sandbox home", "home", home.Path(), "err", err)
		}
	}()
	return runSandbox(ctx, ro, spec, perrun, keys, stderr, log)
}

// runSandbox starts spec in an engine of sodactl's own, with the run's
// audit trail, the caller's terminal and signals passed on, and waits for
// the command; what killed runs left is swept meanwhile.
func runSandbox(ctx context.Context, ro *runOptions, spec sandbox.Spec, perrun *perRun, keys *hostkeys.Keys, stderr io.Writer, log *slog.Logger) (int, error) {
	audit, err := auditSink(ro.auditJSON, ro.auditMax, slices.Concat(spec.ReadWrite, spec.ReadOnly))
	if err != nil {
		return exitSandbox, err
	}
	defer audit.Close()
	// Refused egress is summed up once the command has ended (after the
	// terminal is restored: this defer runs after restore's), instead of
	// a warning per connection, when a sink has every attempt; without
	// one the warnings are the only record and stay.
	var refused egressTally
	journal := systemd.JournalAvailable()
	var sbID string
	defer func() { refused.summary(stderr, auditWhere(journal, sbID, ro.auditJSON)) }()
	ecfg := sandbox.Detect()
	ecfg.Log = log
	ecfg.Audit = func(r sandbox.Record) {
		refused.add(r)
		audit.Write(r)
	}
	ecfg.QuietEgress = journal || ro.auditJSON != ""
	if ecfg.InitPath, err = sandbox.FindInit(); err != nil {
		return exitSandbox, err
	}
	engine, err := sandbox.New(ecfg)
	if err != nil {
		return exitSandbox, err
	}
	defer engine.Close()

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// What killed runs left is swept while this sandbox starts (the sweep
	// never touches a live sandbox, this one included), and before exit.
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		if removed, err := engine.SweepLeftovers(ctx); err != nil {
			log.Warn("remove what killed sandboxes left", "removed", removed, "err", err)
		} else if len(removed) > 0 {
			log.Info("removed what killed sandboxes left", "removed", removed)
		}
	}()
	defer func() { <-swept }()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	restore, err := attachTerminal(&spec)
	if err != nil {
		return exitSandbox, err
	}
	defer restore()

	sb, err := engine.Start(ctx, spec)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return ce.Code, err
		}
		return exitSandbox, err
	}
	sbID = sb.ID
	keys.Attach(sb)
	go func() {
		for s := range sigs {
			// SIGTERM stops the sandbox: the command gets it, and what is
			// left of the sandbox SIGKILL after the grace period, from the
			// host. Forwarded alone, it ended nothing when the command
			// ignored it, or when a fork bomb at its task limit starved
			// the sandbox's init, which forwards it, of its CPU.
			if s == syscall.SIGTERM {
				sb.Stop()
				continue
			}
			_ = sb.Signal(s.(syscall.Signal))
		}
	}()
	return waitSandbox(ctx, ro, sb, spec, perrun, stderr)
}

// waitSandbox waits for the command in sb and returns its exit status; a
// --mcp-config file replaced during the run stops the sandbox (it could
// otherwise read the file unmasked) and fails the run.
func waitSandbox(ctx context.Context, ro *runOptions, sb *sandbox.Sandbox, spec sandbox.Spec, perrun *perRun, stderr io.Writer) (int, error) {
	var replaced atomic.Bool
	endWatch := perrun.watchMask(slices.Concat(spec.ReadWrite, spec.ReadOnly), func() { replaced.Store(true); sb.Stop() }, stderr)
	health := perrun.watchHealth(sb.Stop, stderr)
	st, err := sb.Wait(ctx)
	endWatch()
	if replaced.Load() && err == nil {
		return exitSandbox, fmt.Errorf("--mcp-config %s: the file was replaced during the run; the sandbox was stopped so that it could not read it unmasked", ro.mcpConfig)
	}
	if herr := health(); herr != nil && err == nil {
		return exitSandbox, fmt.Errorf("--mcp-config %s: %w", ro.mcpConfig, herr)
	}
	if err != nil {
		return exitSandbox, err
	}
	if st.TimedOut {
		fmt.Fprintf(stderr, "sodactl: %s stopped after --timeout %s\n", spec.Argv[0], ro.timeout)
	}
	return st.Code, nil
}

// sudoHome is the home of the user who ran sudo, if any.
func sudoHome() string {
	name := os.Getenv("SUDO_USER")
	if name == "" {
		return ""
	}
	u, err := user.Lookup(name)
	if err != nil {
		return ""
	}
	return u.HomeDir
}

// spec turns the command line into a sandbox spec; its errors are usage
// errors.
func (ro *runOptions) spec(argv []string, stdout, stderr io.Writer) (sandbox.Spec, error) {
	var err error
	spec := sandbox.Spec{Argv: argv, Stdin: os.Stdin, Stdout: fileOr(stdout, os.Stdout), Stderr: fileOr(stderr, os.Stderr), Timeout: ro.timeout}
	if spec.Limits.MemoryMax, err = parseSize(ro.memory); err != nil {
		return sandbox.Spec{}, usagef("sodactl run", "--memory: %v", err)
	}
	if spec.Limits.TmpSize, err = parseSize(ro.tmpSize); err != nil {
		return sandbox.Spec{}, usagef("sodactl run", "--tmp-size: %v", err)
	}
	if ro.auditMax, err = parseSize(ro.auditMaxS); err != nil {
		return sandbox.Spec{}, usagef("sodactl run", "--audit-json-max: %v", err)
	}
	if spec.Limits.HomeSize, err = parseSize(ro.homeSize); err != nil {
		return sandbox.Spec{}, usagef("sodactl run", "--home-size: %v", err)
	}
	spec.Limits.TasksMax, spec.Limits.CPUPercent, spec.Limits.CPUWeight = ro.tasks, ro.cpu, ro.cpuWeight
	if ro.cpuWeight > 10000 {
		return sandbox.Spec{}, usagef("sodactl run", "--cpu-weight %d: want 1 to 10000", ro.cpuWeight)
	}
	if spec.AllowDegraded, err = sandbox.ParseLayers(ro.degraded); err != nil {
		return sandbox.Spec{}, usagef("sodactl run", "--allow-degraded: %v", err)
	}
	if v := os.Getenv("SODA_SANDBOX_TEST_UNAVAILABLE"); v != "" {
		for _, l := range strings.Split(v, ",") {
			spec.Knobs.Unavailable = append(spec.Knobs.Unavailable, sandbox.Layer(strings.TrimSpace(l)))
		}
	}
	if ro.noNetwork && (len(ro.mcp)+len(ro.allow)+len(ro.allowPrivate) > 0 || ro.mcpConfig != "") {
		return sandbox.Spec{}, usagef("sodactl run", "--no-network excludes --mcp, --mcp-config, --allow and --allow-private")
	}
	spec.NoNetwork = ro.noNetwork
	for _, a := range ro.allow {
		g, err := egress.ParseGrant(a, false)
		if err != nil {
			return sandbox.Spec{}, usagef("sodactl run", "--allow %s: %v", a, err)
		}
		spec.Egress.Allow = append(spec.Egress.Allow, g)
	}
	for _, a := range ro.allowPrivate {
		g, err := egress.ParseGrant(a, true)
		if err != nil {
			return sandbox.Spec{}, usagef("sodactl run", "--allow-private %s: %v", a, err)
		}
		spec.Egress.Allow = append(spec.Egress.Allow, g)
	}
	for _, e := range ro.env {
		if !strings.Contains(e, "=") {
			v, ok := os.LookupEnv(e)
			if !ok {
				return sandbox.Spec{}, usagef("sodactl run", "--env %s: not set in sodactl's environment", e)
			}
			e += "=" + v
		}
		spec.Env = append(spec.Env, e)
	}
	for _, k := range []string{"TERM", "COLORTERM", "LANG", "LC_ALL", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			spec.Env = append(spec.Env, k+"="+v)
		}
	}
	spec.ReadWrite, spec.ReadOnly, spec.Dir, spec.Unprotect = ro.rw, ro.ro, ro.workdir, ro.unprotect
	// The caller's own home stays out of sight wherever it is (below /home
	// it is hidden anyway), the invoking user's too under sudo.
	for _, h := range []string{os.Getenv("HOME"), sudoHome()} {
		if h != "" {
			spec.Hide = append(spec.Hide, h)
		}
	}

	return spec, nil
}

// mcpGrants resolves the --mcp servers; --token-file stands for the
// token of a single one.
func mcpGrants(opts *options, names []string) ([]mcpgrant.Grant, error) {
	r := opts.resolver()
	var grants []mcpgrant.Grant
	for _, name := range names {
		if err := serverconf.ValidName(name); err != nil {
			return nil, usagef("sodactl run", "--mcp: %v", err)
		}
		tokenFile := ""
		if len(names) == 1 {
			tokenFile = opts.tokenFile
		}
		g, err := r.Grant(name, sandbox.DefaultProxyPort, tokenFile)
		var ge *mcpgrant.Error
		if errors.As(err, &ge) {
			return nil, fmt.Errorf("--mcp %s: %w", name, ge.Err)
		}
		if err != nil {
			return nil, err
		}
		grants = append(grants, g)
	}
	return grants, nil
}

// auditWhere says where a run's audit records are, for its egress
// summary: the journal (with the sandbox's id) and the --audit-json
// file; nil when neither (the warnings on stderr are then the record).
func auditWhere(journal bool, id, jsonPath string) []string {
	var where []string
	if journal {
		where = append(where, "in the journal (journalctl SODA_SANDBOX="+id+")")
	}
	if jsonPath != "" {
		where = append(where, "in "+jsonPath)
	}
	return where
}

// auditSink is where the audit trail goes: the journal when there is one
// (journalctl SODA_SANDBOX=ID), and the --audit-json file if given,
// outside every grant and written up to maxBytes.
func auditSink(jsonPath string, maxBytes int64, grants []string) (*auditsink.Sink, error) {
	o := auditsink.Options{JSONPath: jsonPath, JSONMax: maxBytes, Grants: grants}
	if systemd.JournalAvailable() {
		o.Journal = slog.New(systemd.NewJournalHandler(slog.LevelInfo))
	}
	s, err := auditsink.Open(o)
	if err != nil {
		return nil, fmt.Errorf("--audit-json: %w", err)
	}
	return s, nil
}

// attachTerminal prepares the caller's terminal: on one, the command gets
// its own pty inside the sandbox and the caller's terminal goes raw so
// that keys reach it unchanged; a terminal that is only written to is
// passed as it is. restore puts every terminal's settings back, whatever
// the command did to them.
func attachTerminal(spec *sandbox.Spec) (restore func(), err error) {
	var undo []func() error
	// In reverse: the first saved settings (before raw mode) win when
	// stdin and stdout are the same terminal.
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			_ = undo[i]()
		}
	}
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		if sandbox.IsTerminal(f) {
			if r, err := sandbox.SaveTerminal(f); err == nil {
				undo = append(undo, r)
			}
		}
	}
	if sandbox.IsTerminal(os.Stdin) {
		spec.TTY = true
		r, err := sandbox.MakeRaw(os.Stdin)
		if err != nil {
			restore()
			return nil, err
		}
		undo = append(undo, r)
	}
	return restore, nil
}

// parseSize parses a size flag in NAME.conf's grammar (serverconf.ParseBytes);
// empty means unset.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return serverconf.ParseBytes(s)
}

// fileOr returns w as an *os.File when it is one, else def.
func fileOr(w io.Writer, def *os.File) *os.File {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return def
}
