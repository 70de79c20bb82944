// Command mcpload is a fast load generator for MCP servers and bridges.
//
// Streamable HTTP mode (default): S concurrent sessions each POST initialize,
// send notifications/initialized, run W warm-up and N timed sequential
// tools/call requests, then DELETE the session:
//
//	mcpload -url http://127.0.0.1:8080/mcp [-token T | -token-file F] \
//	        [-sessions S] [-calls N] [-warmup W]
//
// Stdio mode: the same calls, straight to S child processes over stdio (the
// baseline a bridge's added latency is measured against):
//
//	mcpload -stdio [-sessions S] [-calls N] -- CMD ARGS...
//
// Cold-start mode: spawn CMD (a bridge, in its own process group) and poll
// initialize at -url every -poll; the time from spawn to the first success,
// median over -runs runs; the group is killed after each run:
//
//	mcpload -coldstart -url URL [-runs R] [-token-file F] -- CMD ARGS...
//
// It prints one JSON line of results on stdout and a human summary on stderr,
// and exits 1 if any call failed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// config holds the command-line settings.
type config struct {
	url        string
	token      string
	tokenFile  string
	sessions   int
	calls      int
	warmup     int
	tool       string
	args       map[string]any
	expect     string
	protocol   string
	timeout    time.Duration
	getStream  bool
	holdMs     int
	holdFile   string
	stdio      bool
	coldstart  bool
	runs       int
	poll       time.Duration
	maxWait    time.Duration
	command    []string
	readyWait  time.Duration
	quiet      bool
	protoCheck bool
}

// session is one MCP client session over some transport.
type session interface {
	// initialize performs the initialize handshake (request + initialized
	// notification).
	initialize(ctx context.Context) error
	// call performs one tools/call and validates its result.
	call(ctx context.Context) error
	// close ends the session (DELETE, or closing the child's stdin).
	close() error
}

// result is the JSON line printed on stdout.
type result struct {
	Mode        string    `json:"mode"`
	URL         string    `json:"url,omitempty"`
	Sessions    int       `json:"sessions"`
	SessionsOK  int       `json:"sessions_ok"`
	Calls       int       `json:"calls"`
	OKCalls     int       `json:"ok_calls"`
	Errors      int       `json:"errors"`
	Seconds     float64   `json:"seconds"`
	CallsPerSec float64   `json:"calls_per_sec"`
	P50ms       float64   `json:"p50_ms"`
	P90ms       float64   `json:"p90_ms"`
	P99ms       float64   `json:"p99_ms"`
	MaxMs       float64   `json:"max_ms"`
	InitMsP50   float64   `json:"init_ms_p50"`
	InitMsMin   float64   `json:"init_ms_min,omitempty"`
	InitMsMax   float64   `json:"init_ms_max,omitempty"`
	Runs        int       `json:"runs,omitempty"`
	InitMsAll   []float64 `json:"init_ms_all,omitempty"`
	InitErrors  int       `json:"init_errors"`
	CloseErrors int       `json:"close_errors"`
	FirstError  string    `json:"first_error,omitempty"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpload: %v\n", err)
		os.Exit(2)
	}
	stopOnSignal()
	var res result
	switch {
	case cfg.coldstart:
		res, err = runColdstart(cfg)
	default:
		res, err = runLoad(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpload: %v\n", err)
		os.Exit(1)
	}
	b, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpload: encode result: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(b))
	if !cfg.quiet {
		printHuman(res)
	}
	if res.Errors > 0 || res.InitErrors > 0 {
		os.Exit(1)
	}
}

func parseFlags(argv []string) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("mcpload", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
	fs.StringVar(&cfg.token, "token", os.Getenv("MCP_TOKEN"), "bearer token (default $MCP_TOKEN)")
	fs.StringVar(&cfg.tokenFile, "token-file", "", "read the bearer token from `FILE` (re-read until it exists in -coldstart)")
	fs.IntVar(&cfg.sessions, "sessions", 1, "concurrent sessions")
	fs.IntVar(&cfg.calls, "calls", 100, "timed tools/call requests per session")
	fs.IntVar(&cfg.warmup, "warmup", 0, "untimed tools/call requests per session before the timed ones")
	fs.StringVar(&cfg.tool, "tool", "echo", "tool to call")
	argsJSON := fs.String("args", `{"text":"hello"}`, "tool arguments (JSON object)")
	fs.StringVar(&cfg.expect, "expect", "", "text the result's first content item must contain (default: the args' text or message value; \"-\" to skip)")
	fs.StringVar(&cfg.protocol, "protocol", "2025-06-18", "protocolVersion to ask for in initialize")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.BoolVar(&cfg.getStream, "get-stream", false, "open the GET SSE stream per session, like real clients (HTTP mode)")
	fs.IntVar(&cfg.holdMs, "hold-ms", 0, "keep sessions open `MS` after the calls (e.g. to sample RSS)")
	fs.StringVar(&cfg.holdFile, "hold-file", "", "write our pid to `PATH` when the hold starts")
	fs.BoolVar(&cfg.stdio, "stdio", false, "talk stdio to CMD (after --), one child per session")
	fs.BoolVar(&cfg.coldstart, "coldstart", false, "measure spawn of CMD (after --) -> first initialize answered at -url")
	fs.IntVar(&cfg.runs, "runs", 21, "cold-start runs")
	fs.DurationVar(&cfg.poll, "poll", 2*time.Millisecond, "cold-start poll interval")
	fs.DurationVar(&cfg.maxWait, "max-wait", 30*time.Second, "cold-start: give up a run after this long")
	fs.DurationVar(&cfg.readyWait, "ready-wait", 0, "HTTP mode: retry initialize for up to this long (server still starting)")
	fs.BoolVar(&cfg.quiet, "q", false, "no human summary on stderr")
	fs.BoolVar(&cfg.protoCheck, "check-version", true, "fail initialize if the server answers an unsupported protocolVersion")
	if err := fs.Parse(argv); err != nil {
		return nil, fmt.Errorf("parse flags: %w", err)
	}
	cfg.command = fs.Args()
	if err := json.Unmarshal([]byte(*argsJSON), &cfg.args); err != nil {
		return nil, fmt.Errorf("-args: %w", err)
	}
	if cfg.expect == "" {
		for _, k := range []string{"text", "message"} {
			if s, ok := cfg.args[k].(string); ok {
				cfg.expect = s
				break
			}
		}
	}
	if cfg.expect == "-" {
		cfg.expect = ""
	}
	if cfg.tokenFile != "" && cfg.token == "" && !cfg.coldstart {
		b, err := os.ReadFile(cfg.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read token file: %w", err)
		}
		cfg.token = strings.TrimSpace(string(b))
	}
	switch {
	case cfg.stdio && cfg.coldstart:
		return nil, errors.New("-stdio and -coldstart are exclusive")
	case cfg.stdio || cfg.coldstart:
		if len(cfg.command) == 0 {
			return nil, errors.New("a command is needed after --")
		}
	default:
		if len(cfg.command) > 0 {
			return nil, fmt.Errorf("unexpected arguments %q (a command needs -stdio or -coldstart)", cfg.command)
		}
	}
	if !cfg.stdio {
		if cfg.url == "" {
			return nil, errors.New("-url is required")
		}
		if err := checkLoopback(cfg.url); err != nil {
			return nil, err
		}
	}
	if cfg.sessions < 1 || cfg.calls < 0 || cfg.warmup < 0 || cfg.runs < 1 {
		return nil, errors.New("bad -sessions/-calls/-warmup/-runs")
	}
	return cfg, nil
}

// runLoad runs the sessions (HTTP or stdio) and collects the statistics.
func runLoad(cfg *config) (result, error) {
	res := result{Mode: "http", URL: cfg.url, Sessions: cfg.sessions, Calls: cfg.sessions * cfg.calls}
	var newSession func(i int) session
	if cfg.stdio {
		res.Mode, res.URL = "stdio", ""
		newSession = func(int) session { return newStdioSession(cfg) }
	} else {
		client := newHTTPClient(cfg.sessions)
		defer client.CloseIdleConnections()
		newSession = func(int) session { return newHTTPSession(cfg, client) }
	}

	var (
		mu       sync.Mutex
		errs     int
		initErrs int
		firstErr string
		lat      = make([]time.Duration, 0, cfg.sessions*cfg.calls)
		initLat  []time.Duration
	)
	fail := func(n int, err error) {
		mu.Lock()
		errs += n
		if firstErr == "" {
			firstErr = err.Error()
		}
		mu.Unlock()
	}

	// Phase 1: open and warm up all sessions concurrently.
	sessions := make([]session, cfg.sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSession(i)
			t := time.Now()
			if err := initWithRetry(cfg, s); err != nil {
				_ = s.close()
				fail(cfg.calls, fmt.Errorf("session %d: %w", i, err))
				mu.Lock()
				initErrs++
				mu.Unlock()
				return
			}
			d := time.Since(t)
			for k := 0; k < cfg.warmup; k++ {
				if err := callCtx(cfg, s); err != nil {
					fail(0, fmt.Errorf("session %d warm-up: %w", i, err))
				}
			}
			mu.Lock()
			initLat = append(initLat, d)
			mu.Unlock()
			sessions[i] = s
		}()
	}
	wg.Wait()

	// Phase 2: timed calls, all sessions in parallel.
	start := time.Now()
	for i, s := range sessions {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, cfg.calls)
			for k := 0; k < cfg.calls; k++ {
				t := time.Now()
				if err := callCtx(cfg, s); err != nil {
					fail(1, fmt.Errorf("session %d call %d: %w", i, k, err))
					continue
				}
				local = append(local, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := time.Since(start)

	if cfg.holdMs > 0 {
		if cfg.holdFile != "" {
			if err := os.WriteFile(cfg.holdFile, []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
				return res, fmt.Errorf("write hold file: %w", err)
			}
		}
		time.Sleep(time.Duration(cfg.holdMs) * time.Millisecond)
	}

	// Phase 3: close.
	var closeErrs int
	for _, s := range sessions {
		if s == nil {
			continue
		}
		res.SessionsOK++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.close(); err != nil {
				mu.Lock()
				closeErrs++
				if firstErr == "" {
					firstErr = "close: " + err.Error()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	res.OKCalls = len(lat)
	res.Errors = errs
	res.InitErrors = initErrs
	res.CloseErrors = closeErrs
	res.FirstError = firstErr
	res.Seconds = round(wall.Seconds(), 4)
	if wall > 0 {
		res.CallsPerSec = round(float64(len(lat))/wall.Seconds(), 1)
	}
	sortDurations(lat)
	res.P50ms = ms(percentile(lat, 50))
	res.P90ms = ms(percentile(lat, 90))
	res.P99ms = ms(percentile(lat, 99))
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	sortDurations(initLat)
	res.InitMsP50 = ms(percentile(initLat, 50))
	return res, nil
}

// initWithRetry initializes s, retrying for up to cfg.readyWait.
func initWithRetry(cfg *config, s session) error {
	deadline := time.Now().Add(cfg.readyWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		err := s.initialize(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func callCtx(cfg *config, s session) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	return s.call(ctx)
}

func printHuman(r result) {
	switch r.Mode {
	case "coldstart":
		fmt.Fprintf(os.Stderr, "coldstart %s: %d/%d runs ok, spawn->first initialize median %.1f ms (min %.1f, max %.1f)%s\n",
			r.URL, r.Runs-r.Errors, r.Runs, r.InitMsP50, r.InitMsMin, r.InitMsMax, errSuffix(r))
	default:
		target := r.URL
		if r.Mode == "stdio" {
			target = "stdio"
		}
		fmt.Fprintf(os.Stderr, "%s: %d sessions (%d ok, %d failed to initialize) x %d calls: %d ok, %d errors in %.3fs = %.1f calls/s; p50 %.3f p90 %.3f p99 %.3f max %.3f ms; init p50 %.2f ms%s\n",
			target, r.Sessions, r.SessionsOK, r.InitErrors, r.Calls/max(r.Sessions, 1), r.OKCalls, r.Errors, r.Seconds, r.CallsPerSec,
			r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.InitMsP50, errSuffix(r))
	}
}

func errSuffix(r result) string {
	if r.FirstError == "" {
		return ""
	}
	return "; first error: " + r.FirstError
}
