package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/sodadclient"
)

// detectTimeout bounds the look for sodad on the system bus.
const detectTimeout = 3 * time.Second

// chooseMode decides where sodactl run builds the sandbox: in sodad when
// --profile asks for it, or when sodad is on the system bus and has a
// profile for the caller, unless --direct, or options only this process
// has (--audit-json, --allow-degraded, …) are given without --profile;
// else in this process. sodad holds what the caller could not reach alone
// (an administrator's grants, MCP tokens), so running without it widens
// nothing. It logs which, and returns the client for sodad mode (nil:
// direct).
func chooseMode(ctx context.Context, opts *options, ro *runOptions, log *slog.Logger) (*sodadclient.Client, error) {
	if ro.direct {
		if ro.profile != "" {
			return nil, usagef("sodactl run", "--direct excludes --profile (a profile is sodad's)")
		}
		log.Info("sandbox mode: direct", "why", "--direct")
		return nil, nil
	}
	c, ok, err := sodadclient.Detect(ctx, detectTimeout)
	if !ok {
		if c != nil {
			c.Close()
		}
		why := "sodad (" + sodadapi.BusName + ") is not on the system bus"
		if err != nil {
			why = fmt.Sprintf("no system bus to find sodad on (%v)", err)
		}
		if ro.profile != "" {
			return nil, fmt.Errorf("--profile %s: %s; start or install sodad, or run without --profile (or with --direct) to build the sandbox in sodactl", ro.profile, why)
		}
		log.Info("sandbox mode: direct", "why", why)
		return nil, nil
	}
	if ro.profile == "" {
		if used := ro.directOnly(opts); len(used) > 0 {
			c.Close()
			log.Info("sandbox mode: direct", "why", "options only a direct run has: "+strings.Join(used, ", "))
			return nil, nil
		}
		ps, err := c.ListProfiles(ctx)
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(ps) == 0 {
			c.Close()
			log.Info("sandbox mode: direct", "why", "sodad has no profile for you")
			return nil, nil
		}
	}
	return c, nil
}

// directOnly are the options sodad has no counterpart for: refused in
// sodad mode rather than dropped (a silently dropped option could widen
// or hide what the sandbox does).
func (ro *runOptions) directOnly(opts *options) []string {
	var used []string
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"--unprotect", len(ro.unprotect) > 0},
		{"--audit-json", ro.auditJSON != ""},
		{"--audit-json-max", ro.auditMaxS != ""},
		{"--allow-degraded", ro.degraded != ""},
		{"--token-file", opts.tokenFile != ""},
		{"--config-dir", opts.configDir != serverconf.DefaultDir},
		{"--llm", len(ro.llm) > 0},
		{"--secret", len(ro.secret) > 0},
		{"--allow-http", len(ro.allowHTTP) > 0},
		{"--image", ro.image != ""},
	} {
		if o.set {
			used = append(used, o.name)
		}
	}
	return used
}

// sodadSpec is the request sodad gets: only what was asked for, so that
// the profile fills in the rest (an --mcp, --allow or --allow-private
// left out takes the profile's).
func (ro *runOptions) sodadSpec(spec sandbox.Spec) sodadclient.Spec {
	s := sodadclient.Spec{
		NoNetwork: ro.noNetwork, WorkingDirectory: ro.workdir, Environment: spec.Env,
		MemoryMax: uint64(spec.Limits.MemoryMax), TmpSize: uint64(spec.Limits.TmpSize), HomeSize: uint64(spec.Limits.HomeSize),
		TasksMax: uint64(spec.Limits.TasksMax), CPUQuotaPercent: spec.Limits.CPUPercent, CPUWeight: spec.Limits.CPUWeight, Timeout: ro.timeout,
	}
	if len(ro.mcp) > 0 {
		s.MCP = ro.mcp
	}
	if len(ro.allow) > 0 {
		s.Allow = ro.allow
	}
	if len(ro.allowPrivate) > 0 {
		s.AllowPrivate = ro.allowPrivate
	}
	if len(ro.rw) > 0 {
		s.ReadWritePaths = absPaths(ro.rw)
	}
	if len(ro.ro) > 0 {
		s.ReadOnlyPaths = absPaths(ro.ro)
	}
	if s.WorkingDirectory != "" {
		s.WorkingDirectory = absPaths([]string{s.WorkingDirectory})[0]
	}
	return s
}

// absPaths makes paths absolute against sodactl's working directory:
// sodad takes only absolute, clean paths and has a directory of its own.
// Symbolic links are left for sodad to refuse, as direct mode does.
func absPaths(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		out[i] = p
	}
	return out
}

// pickProfile is --profile, else the caller's only profile.
func pickProfile(ctx context.Context, c *sodadclient.Client, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	ps, err := c.ListProfiles(ctx)
	if err != nil {
		return "", err
	}
	switch len(ps) {
	case 1:
		return ps[0].Name, nil
	case 0:
		return "", fmt.Errorf("sodad runs sandboxes, but no profile lets you create one: ask an administrator for one (/etc/soda/sandbox/NAME.conf), or run with --direct")
	default:
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.Name
		}
		return "", usagef("sodactl run", "choose a profile with --profile NAME (yours: %s)", strings.Join(names, ", "))
	}
}

// runViaSodad runs argv in a sandbox of sodad's and returns its exit
// status: the command's, 125 for soda's own failures.
func runViaSodad(ctx context.Context, c *sodadclient.Client, opts *options, ro *runOptions, spec sandbox.Spec, pc *perRunConfig, stdout, stderr io.Writer, log *slog.Logger) (int, error) {
	defer c.Close()
	if used := ro.directOnly(opts); len(used) > 0 {
		return exitSandbox, usagef("sodactl run", "%s: only with --direct (sodad holds the sandbox's grants and audit: see 'sodactl sandbox audit ID')", strings.Join(used, ", "))
	}
	profile, err := pickProfile(ctx, c, ro.profile)
	if err != nil {
		return exitSandbox, err
	}
	out := fileOr(stdout, os.Stdout)
	req := sodadclient.Request{Profile: profile, Argv: spec.Argv, Spec: ro.sodadSpec(spec), Interactive: sandbox.IsTerminal(os.Stdin)}

	// The agent's own servers (--mcp-config) run here, as the caller,
	// never in sodad; sodad grants their ports if the profile allows it,
	// for as long as this process holds the life pipe open.
	perrun, err := pc.start(ctx, log, stderr)
	if err != nil {
		return exitSandbox, err
	}
	defer perrun.close()
	if perrun != nil {
		if err := perrun.sodad(&req.Spec, ro); err != nil {
			return exitSandbox, err
		}
		lifeR, lifeW, err := os.Pipe()
		if err != nil {
			return exitSandbox, err
		}
		defer lifeW.Close()
		defer lifeR.Close() // sodad holds its own copy once Create returns
		req.Stdio.Life = lifeR
	}

	master, restore, err := sodadTerminal(&req, out, stderr)
	if err != nil {
		return exitSandbox, err
	}
	defer restore()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	sb, err := c.Create(ctx, req)
	if err != nil {
		return exitSandbox, err
	}
	defer sb.Close()
	log.Info("sandbox mode: sandbox via sodad", "sandbox", sb.ID, "profile", profile, "object", sb.Path)
	endWatch := perrun.watchMask(slices.Concat(req.Spec.ReadWritePaths, req.Spec.ReadOnlyPaths), func() {
		_ = sb.Kill(ctx, int32(syscall.SIGKILL), false)
	}, stderr)
	defer endWatch()
	health := perrun.watchHealth(func() { _ = sb.Kill(ctx, int32(syscall.SIGKILL), false) }, stderr)

	if master != nil {
		req.Stdio.TTY.Close() // sodad holds it now; master reads EIO once the command lets go
	}
	code, err := waitViaSodad(ctx, sb, master, sigs, ro, spec.Argv[0], out, stderr, log)
	if herr := health(); herr != nil && err == nil {
		return exitSandbox, fmt.Errorf("--mcp-config %s: %w", ro.mcpConfig, herr)
	}
	return code, err
}

// sodadTerminal sets up req's standard streams: on a terminal, a pty
// whose master sodactl keeps (as systemd-run --pty does), the caller's
// terminal raw so that keys go in unchanged, window sizes following;
// else the caller's own streams. restore puts every terminal's settings
// back and closes the pty's ends that sodactl holds.
func sodadTerminal(req *sodadclient.Request, out *os.File, stderr io.Writer) (master *os.File, restore func(), err error) {
	var undo []func() error
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			_ = undo[i]()
		}
	}
	if !sandbox.IsTerminal(os.Stdin) {
		req.Stdio = sodadclient.Stdio{Stdin: os.Stdin, Stdout: out, Stderr: fileOr(stderr, os.Stderr), Life: req.Stdio.Life}
		return nil, restore, nil
	}
	m, slave, err := sodadclient.OpenPTY()
	if err != nil {
		return nil, nil, err
	}
	// Closed last, after the terminals' settings are back (undo runs in
	// reverse).
	undo = append(undo, m.Close, slave.Close)
	master, req.Stdio.TTY = m, slave
	_ = sodadclient.CopyWindowSize(master, os.Stdin)
	for _, f := range []*os.File{out, os.Stderr} {
		if sandbox.IsTerminal(f) {
			if r, err := sandbox.SaveTerminal(f); err == nil {
				undo = append(undo, r)
			}
		}
	}
	r, err := sandbox.MakeRaw(os.Stdin)
	if err != nil {
		restore()
		return nil, nil, err
	}
	undo = append(undo, r)
	return master, restore, nil
}

// waitViaSodad relays the pty (master, when there is one) and the
// caller's signals to sandbox sb, waits for its command and returns its
// exit status, saying why when sodad stopped it (name is the command).
func waitViaSodad(ctx context.Context, sb *sodadclient.Sandbox, master *os.File, sigs <-chan os.Signal, ro *runOptions, name string, out *os.File, stderr io.Writer, log *slog.Logger) (int, error) {
	var relayed <-chan struct{}
	if master != nil {
		relayed = sodadclient.Relay(master, os.Stdin, out)
	}
	go func() {
		killing := false
		for s := range sigs {
			if s == syscall.SIGWINCH {
				if master != nil {
					_ = sodadclient.CopyWindowSize(master, os.Stdin)
				}
				continue
			}
			if err := sb.Kill(ctx, int32(s.(syscall.Signal)), false); err != nil {
				log.Warn("forward a signal to the sandbox", "signal", s, "err", err)
			}
			// SIGTERM stops the sandbox, as in direct mode: SIGKILL
			// follows after the grace period if it has not ended (the
			// sandbox's init dies of it, and its pid namespace with it).
			if s == syscall.SIGTERM && !killing {
				killing = true
				time.AfterFunc(sandbox.StopGrace, func() {
					if err := sb.Kill(ctx, int32(syscall.SIGKILL), false); err != nil {
						log.Debug("kill the sandbox after the grace period", "err", err)
					}
				})
			}
		}
	}()
	exit, err := sb.Wait(ctx)
	if relayed != nil {
		select {
		case <-relayed:
		case <-time.After(2 * time.Second):
		}
	}
	if err != nil {
		return exitSandbox, err
	}
	switch exit.Result {
	case "timeout":
		fmt.Fprintf(stderr, "sodactl: %s stopped after --timeout %s\n", name, ro.timeout)
	case "oom-kill":
		fmt.Fprintf(stderr, "sodactl: %s was killed for want of memory (sandbox %s)\n", name, sb.ID)
	case "supervisor-lost":
		return exitSandbox, fmt.Errorf("sandbox %s: sodad lost it before its command's exit status was known", sb.ID)
	}
	return exit.ExitCode(), nil
}
