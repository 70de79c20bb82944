package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/agentmcp"
	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/perrunmcp"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandbox/wire"
	"github.com/soda-project/soda/internal/sodadclient"
)

// perRun is what --mcp-config adds to a run: the agent's own stdio
// servers running on the host, its inside and remote ones, and the mask
// the sandbox sees in place of the file.
type perRun struct {
	set *perrunmcp.Set
	// others are the inside and remote servers, for the agents' files; a
	// remote one on the host's loopback has its Port, relayed.
	others []mcpgrant.Grant
	allow  []egress.Grant // the other remote servers' host:port
	mask   sandbox.Mask
}

// maxConfigBytes bounds the --mcp-config file.
const maxConfigBytes = wire.MaxMaskBytes

// perRunConfig is a parsed --mcp-config file, checked against the
// command line, not started yet.
type perRunConfig struct {
	file     string
	data     []byte
	plan     perrunmcp.Plan
	firstUse bool // --mcp-check first-use
}

// loadPerRun reads and checks --mcp-config (nil without one); with none
// given it checks that --mcp-inside and --mcp-optional are not either.
func loadPerRun(ro *runOptions) (*perRunConfig, error) {
	switch ro.mcpCheck {
	case "first-use", "before", "":
	default:
		return nil, usagef("sodactl run", "--mcp-check %q: want first-use or before", ro.mcpCheck)
	}
	if ro.mcpConfig == "" {
		if len(ro.mcpInside)+len(ro.mcpOptional) > 0 {
			return nil, usagef("sodactl run", "--mcp-inside and --mcp-optional name servers of --mcp-config FILE")
		}
		return nil, nil
	}
	file := ro.mcpConfig
	data, err := readConfig(file)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	c, err := agentmcp.Parse(file, data)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	if err := c.Expand(os.LookupEnv); err != nil {
		return nil, fmt.Errorf("--mcp-config %s: %w", file, err)
	}
	plan, err := perrunmcp.NewPlan(c, ro.mcpInside, ro.mcpOptional)
	if err != nil {
		return nil, usagef("sodactl run", "--mcp-config %s: %v", file, err)
	}
	for _, s := range c.Servers {
		if slices.Contains(ro.mcp, s.Name) {
			return nil, usagef("sodactl run", "--mcp %s and --mcp-config %s both name %s: grant one of them", s.Name, file, s.Name)
		}
	}
	return &perRunConfig{file: file, data: data, plan: plan, firstUse: ro.mcpCheck != "before"}, nil
}

// start starts the host servers of pc (nil: nothing to do) and grants the
// others. Each server's mode is written to stderr, one line each.
func (pc *perRunConfig) start(ctx context.Context, log *slog.Logger, stderr io.Writer) (*perRun, error) {
	if pc == nil {
		return nil, nil
	}
	file, data, plan := pc.file, pc.data, pc.plan
	p := &perRun{}
	for _, s := range plan.Remote {
		hp, err := s.HostPort()
		if err != nil {
			return nil, fmt.Errorf("--mcp-config %s: %w", file, err)
		}
		g := mcpgrant.Grant{Entry: clientconfig.Server{Name: s.Name, URL: s.URL, Headers: s.Headers}}
		if port, ok := loopbackPort(s.URL); ok {
			// The host's own loopback: relayed like a soda-mcp@ server.
			if port == sandbox.DefaultProxyPort {
				return nil, fmt.Errorf("--mcp-config %s: server %s: port %d is the sandbox proxy's", file, s.Name, port)
			}
			g.Port = port
		} else {
			g, err := egress.ParseGrant(hp, false)
			if err != nil {
				return nil, fmt.Errorf("--mcp-config %s: server %s: %w", file, s.Name, err)
			}
			p.allow = append(p.allow, g)
		}
		p.others = append(p.others, g)
		fmt.Fprintf(stderr, "sodactl: MCP server %s: remote (%s), %s granted\n", s.Name, s.Transport, hp)
	}
	for _, s := range plan.Inside {
		p.others = append(p.others, mcpgrant.Grant{Entry: clientconfig.Server{Name: s.Name, Command: s.Command, Args: s.Args, Env: s.Env}})
		fmt.Fprintf(stderr, "sodactl: MCP server %s: inside the sandbox (--mcp-inside), started by the agent\n", s.Name)
	}
	for _, n := range plan.Disabled {
		fmt.Fprintf(stderr, "sodactl: MCP server %s: disabled in %s, not started\n", n, file)
	}
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for _, line := range startNotices(plan.Host) {
		fmt.Fprintln(stderr, line)
	}
	if p.set, err = perrunmcp.Start(ctx, log, perrunmcp.Options{Servers: plan.Host, Optional: plan.Optional, Dir: dir, ReservedPort: sandbox.DefaultProxyPort, FirstUse: pc.firstUse}); err != nil {
		return nil, fmt.Errorf("--mcp-config %s: %w", file, err)
	}
	drop := slices.Clone(plan.Disabled)
	for _, f := range p.set.Skipped {
		drop = append(drop, f.Name)
		fmt.Fprintf(stderr, "sodactl: MCP server %s: skipped (--mcp-optional), it failed its health check: %v\n", f.Name, f.Err)
	}
	for _, s := range p.set.Servers {
		when := ""
		if pc.firstUse && !slices.Contains(plan.Optional, s.Name) {
			when = " (checked by the agent's first session)"
		}
		fmt.Fprintf(stderr, "sodactl: MCP server %s: on the host, %s%s\n", s.Name, s.Grant.Entry.URL, when)
	}
	eps := p.set.Endpoints()
	for _, s := range plan.Remote {
		eps[s.Name] = agentmcp.Endpoint{URL: s.URL, Headers: s.Headers}
	}
	masked, err := agentmcp.Rewrite(file, data, eps, drop)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	p.mask = sandbox.Mask{Path: file, Data: masked}
	return p, nil
}

// startNotices are the lines said before the host servers start: one for
// each server that a package runner (npx, uvx...) starts, which may
// download its package first, so that the wait for its health check is
// not silent.
func startNotices(servers []agentmcp.Server) []string {
	var lines []string
	for _, s := range servers {
		runner := packageRunner(s.Command, s.Args)
		if runner == "" {
			continue
		}
		lines = append(lines, fmt.Sprintf("sodactl: MCP server %s: starting on the host (%s may download its package first; waiting up to %d s for it to answer)",
			s.Name, runner, int(perrunmcp.DefaultStartTimeout.Seconds())))
	}
	return lines
}

// packageRunner names the package runner that command args is, "" when
// it is none: npx, bunx, pnpx, uvx, or npm exec, pnpm dlx, yarn dlx, bun x.
func packageRunner(command string, args []string) string {
	base := filepath.Base(command)
	sub := map[string][]string{"npm": {"exec", "x"}, "pnpm": {"dlx"}, "yarn": {"dlx"}, "bun": {"x"}}
	switch {
	case slices.Contains([]string{"npx", "bunx", "pnpx", "uvx"}, base):
		return base
	case len(args) > 0 && slices.Contains(sub[base], args[0]):
		return base + " " + args[0]
	}
	return ""
}

// grants are the run's servers as the agents' files name them: the host
// servers' grants, then the inside and remote servers (nil-safe).
func (p *perRun) grants() []mcpgrant.Grant {
	if p == nil {
		return nil
	}
	return slices.Concat(p.set.Grants(), p.others)
}

// apply adds the remote servers' host:port and the mask to spec (the
// servers' ports are the recipe's: agentrun.Build).
func (p *perRun) apply(spec *sandbox.Spec) {
	if p == nil {
		return
	}
	spec.Egress.Allow = append(spec.Egress.Allow, p.allow...)
	spec.Masks = append(spec.Masks, p.mask)
}

// sodad puts the run's servers and mask into a request to sodad: the
// host servers as ports of the caller's with their tokens, the inside and
// remote ones as entries. A remote server's HOST:PORT joins --allow when
// one is given; without it the profile's allow-list decides.
func (p *perRun) sodad(s *sodadclient.Spec, ro *runOptions) error {
	if slices.ContainsFunc(p.others, func(g mcpgrant.Grant) bool { return g.Port != 0 }) {
		return usagef("sodactl run", "--mcp-config: a remote server on the host's loopback cannot be granted through sodad; run it as a stdio server of the file, or use --direct")
	}
	for _, g := range p.set.Grants() {
		s.RunMCP = append(s.RunMCP, sodadclient.RunServer{Name: g.Entry.Name, Port: g.Port, Token: g.Entry.Token})
	}
	for _, g := range p.others {
		e := g.Entry
		s.RunMCP = append(s.RunMCP, sodadclient.RunServer{Name: e.Name, URL: e.URL, Headers: e.Headers, Command: e.Command, Args: e.Args, Env: e.Env})
	}
	if len(ro.allow) > 0 {
		for _, g := range p.allow {
			s.Allow = append(s.Allow, g.String())
		}
	}
	path, err := filepath.Abs(p.mask.Path)
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err != nil {
		return fmt.Errorf("--mcp-config: %w", err)
	}
	// sodad masks only files inside the granted directories.
	if under(path, slices.Concat(s.ReadWritePaths, s.ReadOnlyPaths)) {
		s.Masks = append(s.Masks, sodadclient.Mask{Path: path, Data: p.mask.Data})
	}
	return nil
}

// close stops the host servers and waits for their children (nil-safe).
// watchHealth calls stop when a server checked by its first use fails
// during the run (saying so on stderr); result, called once the command
// has ended, is that failure (nil: none), after waiting a moment for the
// failure of a server whose child has already exited.
func (p *perRun) watchHealth(stop func(), stderr io.Writer) (result func() error) {
	if p == nil || p.set == nil {
		return func() error { return nil }
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case err := <-p.set.Failures():
			fmt.Fprintf(stderr, "sodactl: %v: stopping the run\n", err)
			stop()
		case <-done:
		}
	})
	return func() error {
		close(done)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		p.set.Settle(ctx)
		return p.set.Failed()
	}
}

func (p *perRun) close() {
	if p != nil && p.set != nil {
		p.set.Close(context.Background())
	}
}

// readConfig reads an MCP configuration file of at most maxConfigBytes.
func readConfig(file string) ([]byte, error) {
	// Non-blocking, so that a FIFO in its place cannot hang the run.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", file)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, maxConfigBytes)
	}
	return data, nil
}

// loopbackPort is the port of a URL on the host's loopback.
func loopbackPort(u string) (uint16, bool) {
	pu, err := url.Parse(u)
	if err != nil {
		return 0, false
	}
	h := pu.Hostname()
	if ip := net.ParseIP(h); !(h == "localhost" || ip != nil && ip.IsLoopback()) {
		return 0, false
	}
	port, err := strconv.ParseUint(pu.Port(), 10, 16)
	if err != nil || port == 0 {
		return 0, false
	}
	return uint16(port), true
}

// under says whether path lies below one of dirs (their links resolved).
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			if r, err = filepath.Abs(r); err == nil && strings.HasPrefix(path, r+"/") {
				return true
			}
		}
	}
	return false
}
