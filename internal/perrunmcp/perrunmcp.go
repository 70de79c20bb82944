// Package perrunmcp runs an agent's own stdio MCP servers (read by package
// agentmcp) on the host for the length of one sandboxed run, each behind
// soda's bridge: a fresh bearer token and a free loopback port per server,
// one supervised child per client session (internal/mcpbridge, which kills
// a child's whole group even when this process is killed), its
// environment, API keys included, given to the children only. Each server
// is health-checked with initialize: before Start returns, or, with
// Options.FirstUse, by the agent's own first session, on a child started
// ahead (mcpbridge's Prestart), so that each server starts once and its
// start-up overlaps the sandbox's and the agent's (Set.Failures reports a
// failure as it happens). The grants Start returns are what the sandbox's
// egress relays and the agents' configuration names. It is the host side
// of sodactl run --mcp-config (issue 15).
package perrunmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/agentmcp"
	"github.com/soda-project/soda/internal/cgroup"
	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/httpfront"
	"github.com/soda-project/soda/internal/mcpbridge"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/token"
)

// DefaultStartTimeout bounds a server's health check: npx may have to
// fetch a package first.
const DefaultStartTimeout = 60 * time.Second

// Options configure Start.
type Options struct {
	// Servers are the stdio servers to run (Transport "stdio").
	Servers []agentmcp.Server
	// Optional names servers whose failed health check is logged and
	// skipped instead of failing Start.
	Optional []string
	// Dir is the children's working directory (empty: the caller's).
	Dir string
	// StartTimeout bounds each health check (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// ReservedPort is a port no server may listen on (the sandbox proxy's).
	ReservedPort uint16
	// Placer isolates the children (nil: cgroup.NewPlacer's choice).
	Placer cgroup.Placer
	// FirstUse checks the required servers by their first use instead of
	// before Start returns: each starts a child at once, which the first
	// client session takes; that session's initialize, or the child's
	// exit before any session took it, is the check, and a failure is
	// sent on Set.Failures. The optional servers are still checked before
	// Start returns: a failed one is left out of the agent's
	// configuration, which must be written before the agent starts.
	FirstUse bool
}

// Server is one per-run server that passed its health check, or whose
// check is its first use (Options.FirstUse).
type Server struct {
	Name   string
	Grant  mcpgrant.Grant
	bridge *mcpbridge.Bridge
	front  *httpfront.Front
	cancel context.CancelFunc
	// firstUse is the outcome of the check by first use, nil when the
	// server was checked before Start returned; checked is closed once
	// that outcome is recorded.
	firstUse <-chan error
	checked  chan struct{}
}

// Failure is a server that failed its health check.
type Failure struct {
	Name string
	Err  error
}

// Set is the per-run servers of one run.
type Set struct {
	log     *slog.Logger
	Servers []*Server // sorted by name
	// Skipped are the optional servers that failed their health check.
	Skipped []Failure

	failures chan error    // the checks by first use that failed (*Error)
	closed   chan struct{} // closed by Close
	closing  sync.Once
	settled  sync.WaitGroup
	mu       sync.Mutex
	failed   []error // what was sent on failures
}

// Error is a required server that failed its health check: its name and
// what it said (the bridge's error carries its stderr tail).
type Error struct{ Failure }

func (e *Error) Error() string {
	return fmt.Sprintf("MCP server %s failed its health check: %v", e.Name, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Start starts every server in opts and health-checks them in parallel.
// When a required one fails, everything started is stopped again and the
// error names it.
func Start(ctx context.Context, log *slog.Logger, opts Options) (*Set, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	set := &Set{log: log}
	type result struct {
		s   *Server
		err error
	}
	results := make([]result, len(opts.Servers))
	var wg sync.WaitGroup
	for i, srv := range opts.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := start(ctx, log.With("server", srv.Name), srv, opts)
			results[i] = result{s, err}
		}()
	}
	wg.Wait()
	var failed []error
	for i, r := range results {
		name := opts.Servers[i].Name
		switch {
		case r.err == nil:
			set.Servers = append(set.Servers, r.s)
		case slices.Contains(opts.Optional, name):
			log.Warn("optional MCP server skipped: it failed its health check", "server", name, "err", r.err)
			set.Skipped = append(set.Skipped, Failure{name, r.err})
		default:
			failed = append(failed, &Error{Failure{name, r.err}})
		}
	}
	sort.Slice(set.Servers, func(i, j int) bool { return set.Servers[i].Name < set.Servers[j].Name })
	if len(failed) > 0 {
		set.Close(context.Background())
		return nil, errors.Join(failed...)
	}
	set.failures, set.closed = make(chan error, len(set.Servers)), make(chan struct{})
	for _, srv := range set.Servers {
		if srv.firstUse == nil {
			continue
		}
		set.settled.Add(1)
		srv.checked = make(chan struct{})
		go func() {
			defer set.settled.Done()
			defer close(srv.checked)
			var err error
			select {
			case err = <-srv.firstUse:
			case <-set.closed:
				return
			}
			if err != nil {
				ferr := &Error{Failure{srv.Name, err}}
				set.mu.Lock()
				set.failed = append(set.failed, ferr)
				set.mu.Unlock()
				set.failures <- ferr
			} else {
				log.Info("per-run MCP server checked by its first session", "server", srv.Name)
			}
		}()
	}
	return set, nil
}

// Failures sends each required server whose check by first use failed
// (Options.FirstUse), as an *Error naming it, with its stderr tail.
func (s *Set) Failures() <-chan error { return s.failures }

// Settle waits (until ctx is done) for the failure of each server whose
// child has already failed, so that a run that ends before the failure was
// read still sees it in Failed; a server still running, checked or not,
// is not waited for.
func (s *Set) Settle(ctx context.Context) {
	for _, srv := range s.Servers {
		if srv.firstUse == nil || !srv.bridge.PrestartGone() {
			continue
		}
		select {
		case <-srv.checked:
		case <-ctx.Done():
			return
		}
	}
}

// Failed returns what Failures sent so far, joined (nil: nothing).
func (s *Set) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.failed...)
}

func start(ctx context.Context, log *slog.Logger, srv agentmcp.Server, opts Options) (*Server, error) {
	if srv.Transport != "stdio" || srv.Command == "" {
		return nil, errors.New("not a stdio server")
	}
	path, err := exec.LookPath(srv.Command)
	if err != nil {
		return nil, fmt.Errorf("command %s: %w", srv.Command, err)
	}
	tok, err := token.Generate()
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	ln, err := listen(opts.ReservedPort)
	if err != nil {
		return nil, err
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	env := make([]string, 0, len(srv.Env))
	for _, k := range slices.Sorted(maps.Keys(srv.Env)) {
		env = append(env, k+"="+srv.Env[k])
	}
	placer := opts.Placer
	if placer == nil {
		placer = cgroup.NewPlacer(log, "soda-run-"+srv.Name, cgroup.Limits{})
	}
	// The bounds of a soda-mcp@NAME unit with its defaults (serverconf.Defaults).
	b := serverconf.Defaults(srv.Name).Bridge
	bridge := mcpbridge.New(log, mcpbridge.Options{
		Name:                 srv.Name,
		Spec:                 child.Spec{Argv: append([]string{path}, srv.Args...), Dir: opts.Dir, Env: env, Supervise: true},
		Placer:               placer,
		MaxSessions:          b.MaxSessions,
		IdleTimeout:          b.IdleTimeout,
		CallTimeout:          b.CallTimeout,
		StartTimeout:         opts.StartTimeout,
		MaxBodyBytes:         b.MaxBodyBytes,
		StderrLinesPerSecond: b.StderrLinesPerSecond,
	})
	runCtx, cancel := context.WithCancel(context.Background())
	go bridge.Run(runCtx)
	var firstUse <-chan error
	if opts.FirstUse && !slices.Contains(opts.Optional, srv.Name) {
		bridge.Prestart()
		firstUse = bridge.FirstStart()
	} else {
		pctx, pcancel := context.WithTimeout(ctx, opts.StartTimeout)
		err = bridge.Probe(pctx)
		pcancel()
		if err != nil {
			ln.Close()
			_ = bridge.Shutdown(context.Background())
			cancel()
			return nil, err
		}
	}
	front := httpfront.New(log, httpfront.Options{Name: srv.Name, Token: tok, MaxConnections: b.MaxConnections, MaxHeaderBytes: b.MaxHeaderBytes, ReadTimeout: b.ReadTimeout}, bridge.Handler())
	go func() { _ = front.Serve(ln) }()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, mcpbridge.PathMCP)
	log.Info("per-run MCP server on the host", "url", url, "command", path)
	return &Server{
		Name:   srv.Name,
		Grant:  mcpgrant.Grant{Entry: clientconfig.Server{Name: srv.Name, URL: url, Token: tok}, Port: port},
		bridge: bridge, front: front, cancel: cancel, firstUse: firstUse,
	}, nil
}

// listen takes a free loopback port other than reserved.
func listen(reserved uint16) (net.Listener, error) {
	for range 8 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen on loopback: %w", err)
		}
		if uint16(ln.Addr().(*net.TCPAddr).Port) != reserved {
			return ln, nil
		}
		ln.Close()
	}
	return nil, errors.New("listen on loopback: no free port")
}

// Grants are the servers' grants, for the sandbox and the agents.
func (s *Set) Grants() []mcpgrant.Grant {
	var g []mcpgrant.Grant
	for _, srv := range s.Servers {
		g = append(g, srv.Grant)
	}
	return g
}

// Close drains every server (5 s) and stops its children; it returns once
// all of them are gone.
func (s *Set) Close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s.closed != nil {
		s.closing.Do(func() { close(s.closed) })
		defer s.settled.Wait()
	}
	var wg sync.WaitGroup
	for _, srv := range s.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.front.SetDraining(true)
			if err := srv.bridge.Shutdown(ctx); err != nil {
				s.log.Warn("per-run MCP server: drain incomplete", "server", srv.Name, "err", err)
			}
			if err := srv.front.Shutdown(ctx); err != nil {
				srv.front.Close()
			}
			srv.cancel()
		}()
	}
	wg.Wait()
}

// Plan is what a run does with each server of an agent's configuration.
type Plan struct {
	// Host are the stdio servers to run on the host (Start).
	Host []agentmcp.Server
	// Inside are the stdio servers the agent starts itself, inside the
	// sandbox (sodactl run --mcp-inside).
	Inside []agentmcp.Server
	// Remote are the http and sse servers: their host:port is granted.
	Remote []agentmcp.Server
	// Disabled are the servers the configuration disables.
	Disabled []string
	// Optional are the servers whose failed health check skips them.
	Optional []string
}

// NewPlan sorts the servers of c: inside names the stdio servers to run
// inside the sandbox, optional those whose failed health check does not
// stop the run; both must name servers of c (inside a stdio one).
func NewPlan(c *agentmcp.Config, inside, optional []string) (Plan, error) {
	byName := map[string]agentmcp.Server{}
	for _, s := range c.Servers {
		byName[s.Name] = s
	}
	for _, n := range slices.Concat(inside, optional) {
		if _, ok := byName[n]; !ok {
			return Plan{}, fmt.Errorf("no MCP server %q in the configuration (it has %s)", n, names(c.Servers))
		}
	}
	p := Plan{Optional: optional}
	for _, n := range inside {
		if byName[n].Transport != "stdio" {
			return Plan{}, fmt.Errorf("MCP server %s is a remote (%s) one: only a stdio server can run inside the sandbox", n, byName[n].Transport)
		}
	}
	for _, s := range c.Servers {
		switch {
		case s.Disabled:
			p.Disabled = append(p.Disabled, s.Name)
		case s.Transport != "stdio":
			p.Remote = append(p.Remote, s)
		case slices.Contains(inside, s.Name):
			p.Inside = append(p.Inside, s)
		default:
			p.Host = append(p.Host, s)
		}
	}
	return p, nil
}

func names(servers []agentmcp.Server) string {
	if len(servers) == 0 {
		return "none"
	}
	var n []string
	for _, s := range servers {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// Endpoints are the running servers' URLs and tokens, by name (what
// agentmcp.Rewrite puts in place of their commands).
func (s *Set) Endpoints() map[string]agentmcp.Endpoint {
	eps := map[string]agentmcp.Endpoint{}
	for _, srv := range s.Servers {
		eps[srv.Name] = agentmcp.Endpoint{URL: srv.Grant.Entry.URL, Token: srv.Grant.Entry.Token}
	}
	return eps
}
