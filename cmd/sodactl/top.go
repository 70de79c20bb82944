//go:build !soda_lean

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/token"
	"github.com/soda-project/soda/internal/top"
)

const topUsage = `Usage: sodactl top [--once] [--interval DURATION] [--textfile-dir DIR]

A live view of every soda daemon on this host, from their Prometheus
metrics: each running soda-mcpd (GET /metrics with its token, found by its
runtime record; root or group soda reads the tokens) with its sessions,
children, calls per second, p99 latency and refusals over the interval;
and the textfiles in /run/soda/metrics (sodad --metrics-textfile: live
sandboxes and their egress). Refreshed in place; q or Ctrl-C quits.

Options:
  --once               print one screen, measured over one interval, and exit
  --interval DURATION  time between samples (default 2s)
  --textfile-dir DIR   where the daemons' textfiles are (default
                       /run/soda/metrics)
  --runtime-dir DIR    where the running soda-mcpd's runtime records are
                       (default /run/soda/mcp, and $XDG_RUNTIME_DIR/soda/mcp
                       for a user)
  --config-dir DIR     accepted, as by every sodactl command; unused here
  --token-file FILE    accepted, as by every sodactl command; unused here
  -h, --help           show this help
`

// topOptions holds the options of "sodactl top".
type topOptions struct {
	once     bool
	interval time.Duration
	textDir  string
}

// flagSet returns the flags of "sodactl top": the shared ones, bound to
// opts, and its own, bound to to.
func (to *topOptions) flagSet(opts *options) *flag.FlagSet {
	fs := sharedFlags(opts, "sodactl top")
	fs.BoolVar(&to.once, "once", false, "")
	fs.DurationVar(&to.interval, "interval", 2*time.Second, "")
	fs.StringVar(&to.textDir, "textfile-dir", top.TextfileDir, "")
	return fs
}

func topCommand(opts *options, args []string, stdout io.Writer) error {
	const cmd = "sodactl top"
	var to topOptions
	fs := to.flagSet(opts)
	once, interval, textDir := &to.once, &to.interval, &to.textDir
	if err := parse(fs, args, topUsage, cmd); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef(cmd, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *interval < 100*time.Millisecond {
		return usagef(cmd, "--interval %s: at least 100ms", *interval)
	}
	client := &http.Client{Timeout: 3 * time.Second}
	ctx := context.Background()
	sources := topSources(opts, *textDir)
	prev := top.Read(ctx, client, sources)
	if *once {
		time.Sleep(*interval)
		cur := top.Read(ctx, client, sources)
		top.Render(stdout, top.Rows(prev, cur), cur.Time, *interval)
		return nil
	}

	// Live: raw keys on a terminal (q quits; Ctrl-C arrives as a byte).
	quit := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	out := stdout
	if sandbox.IsTerminal(os.Stdin) {
		restore, err := sandbox.MakeRaw(os.Stdin)
		if err != nil {
			return err
		}
		defer func() { _ = restore(); fmt.Fprint(stdout, "\n") }()
		out = crlf{stdout}
		go func() {
			b := make([]byte, 1)
			for {
				if n, err := os.Stdin.Read(b); err != nil || n == 1 && (b[0] == 'q' || b[0] == 'Q' || b[0] == 3) {
					close(quit)
					return
				}
			}
		}()
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return nil
		case <-sigs:
			return nil
		case <-t.C:
		}
		sources = topSources(opts, *textDir) // servers come and go
		cur := top.Read(ctx, client, sources)
		fmt.Fprint(out, "\x1b[H\x1b[2J")
		top.Render(out, top.Rows(matchPrev(prev, cur), cur), cur.Time, *interval)
		prev = cur
	}
}

// topSources are the running soda-mcpd (by their runtime records) and the
// textfiles of the daemons that write one.
func topSources(opts *options, textDir string) []top.Source {
	var out []top.Source
	var names []string
	for _, n := range runningNames(opts.searchDirs()) {
		rec, _, err := runstate.Lookup(n, opts.searchDirs())
		if err != nil || len(rec.Listen) == 0 || slices.Contains(names, n) {
			continue
		}
		names = append(names, n)
		src := top.Source{Name: n, URL: "http://" + rec.Listen[0] + "/metrics"}
		if rec.Auth {
			tok, err := token.Read(rec.TokenFile)
			if err != nil {
				src.Err = fmt.Errorf("cannot read its token (root or group soda can): %v", err)
			}
			src.Token = tok
		}
		out = append(out, src)
	}
	for _, s := range top.TextfileSources(textDir) {
		if n, ok := strings.CutPrefix(s.Name, "soda-mcp@"); ok && slices.Contains(names, n) {
			continue // scraped over HTTP already
		}
		out = append(out, s)
	}
	return out
}

// matchPrev lines prev's families up with cur's sources by name (the
// list may have changed between samples).
func matchPrev(prev, cur top.Sample) top.Sample {
	m := top.Sample{Time: prev.Time, Sources: cur.Sources, Fams: make([]top.Families, len(cur.Sources)), Errs: make([]error, len(cur.Sources))}
	for i, s := range cur.Sources {
		for j, p := range prev.Sources {
			if p.Name == s.Name {
				m.Fams[i] = prev.Fams[j]
			}
		}
	}
	return m
}

// crlf turns \n into \r\n for a terminal in raw mode.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	_, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n")))
	return len(p), err
}
