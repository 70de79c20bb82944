package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the source of the e2e package")
	}
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// box is a running test/box/sdbox.
type box struct {
	sdbox string // path of test/box/sdbox
	dir   string // the box's DIR
}

// result is what a command in the box did.
type result struct {
	args   []string
	stdout string
	stderr string
	code   int
	err    error // non-nil for a non-zero exit, a timeout or a start failure
}

func (r result) String() string {
	s := fmt.Sprintf("$ %s\n", strings.Join(r.args, " "))
	if r.stdout != "" {
		s += r.stdout
		if !strings.HasSuffix(r.stdout, "\n") {
			s += "\n"
		}
	}
	if r.stderr != "" {
		s += "stderr: " + r.stderr
		if !strings.HasSuffix(r.stderr, "\n") {
			s += "\n"
		}
	}
	if r.err != nil {
		s += fmt.Sprintf("error: %v\n", r.err)
	}
	return s
}

type runOpts struct {
	timeout time.Duration
	stdin   string
	env     []string
}

// exec runs args in the box and waits (bounded by o.timeout, 60 s by
// default). A command killed by the timeout keeps running in the box until
// down; every command here is bounded itself as well.
func (b *box) exec(o runOpts, args ...string) result {
	if o.timeout == 0 {
		o.timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.sdbox, append([]string{"exec", b.dir, "--"}, args...)...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), o.env...)
	if o.stdin != "" {
		cmd.Stdin = strings.NewReader(o.stdin)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{args: args, stdout: so.String(), stderr: se.String(), err: err}
	if ctx.Err() != nil {
		r.err = fmt.Errorf("timed out after %s", o.timeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code = -1
	}
	return r
}

// run runs args in the box with the defaults.
func (b *box) run(args ...string) result { return b.exec(runOpts{}, args...) }

// sh runs a shell script in the box.
func (b *box) sh(script string) result { return b.exec(runOpts{}, "sh", "-c", script) }

// must fails t unless r succeeded, and returns its stdout.
func must(t *testing.T, r result) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("command failed in the box:\n%s", r)
	}
	return r.stdout
}

// journalTail logs the end of the box's journal: call it when a step failed.
func (b *box) journalTail(t *testing.T, n int) {
	t.Helper()
	r := b.exec(runOpts{timeout: 15 * time.Second}, "journalctl", "-b", "--no-pager", "-n", fmt.Sprint(n), "-o", "short-monotonic")
	t.Logf("journal tail (last %d lines of the box's journal):\n%s%s", n, r.stdout, r.stderr)
}

// onFailJournal prints the journal tail at the end of t if t failed.
func (b *box) onFailJournal(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			b.journalTail(t, 80)
		}
	})
}

// write writes content to path in the box (through stdin: nothing of it on
// a command line).
func (b *box) write(t *testing.T, path, content string, mode string) {
	t.Helper()
	must(t, b.exec(runOpts{stdin: content}, "sh", "-c",
		`mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"`, "sh", path, mode))
}

// bg is a command running in the box in the background, its stdout read
// line by line.
type bg struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{}
	err    error
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start starts args in the box in the background. It is killed (on the
// host side) when t ends; the test closes its stdin to end it cleanly.
func (b *box) start(t *testing.T, env []string, args ...string) *bg {
	t.Helper()
	cmd := exec.Command(b.sdbox, append([]string{"exec", b.dir, "--"}, args...)...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), env...)
	p := &bg{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
	})
	return p
}

// next returns the next stdout line, or fails t after timeout.
func (p *bg) next(t *testing.T, timeout time.Duration, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			t.Fatalf("%s: the client ended without output (%v); stderr:\n%s", what, p.err, p.stderr.String())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("%s: no answer within %s; stderr so far:\n%s", what, timeout, p.stderr.String())
	}
	return ""
}

// finish closes stdin and waits for the command to end.
func (p *bg) finish(t *testing.T, timeout time.Duration) {
	t.Helper()
	p.stdin.Close()
	for range p.lines { // drain
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		t.Errorf("background client did not end within %s", timeout)
	}
}

// clientResult is one JSON line of client.mjs.
// probeResult is one connection of client.mjs probe: when it was opened
// (from the probe's start) and how long it waited for its answer.
type probeResult struct {
	OpenedMS float64 `json:"opened_ms"`
	WaitedMS float64 `json:"waited_ms"`
	Status   int     `json:"status"`
	Error    string  `json:"error"`
}

type clientResult struct {
	OK        bool    `json:"ok"`
	Text      string  `json:"text"`
	Code      int     `json:"code"`
	Message   string  `json:"message"`
	Stage     string  `json:"stage"`
	SessionID string  `json:"sessionId"`
	MS        float64 `json:"ms"`
	Status    int     `json:"status"`
	Error     string  `json:"error"`
	Attempts  []struct {
		AtMS   float64 `json:"at_ms"`
		Status int     `json:"status"`
		Error  string  `json:"error"`
	} `json:"attempts"`
	// probe
	Probes    int            `json:"probes"`
	Count     map[string]int `json:"count"`
	MaxWaitMS float64        `json:"max_wait_ms"`
	Results   []probeResult  `json:"results"`
	// bench
	Runs     int       `json:"runs"`
	Times    []float64 `json:"ms_all"`
	MedianMS float64   `json:"median_ms"`
	MinMS    float64   `json:"min_ms"`
	MaxMS    float64   `json:"max_ms"`
}

func parseClient(t *testing.T, line string) clientResult {
	t.Helper()
	var r clientResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("client output is not JSON: %q: %v", line, err)
	}
	return r
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// onSignal tears the box down if the test binary is interrupted (go test's
// own timeout sends SIGQUIT, which Go does not let us catch: the next run's
// "down" of the same DIR cleans up then).
func onSignal(down func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(os.Stderr, "e2e: %v: tearing the box down\n", s)
			down()
			os.Exit(1)
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
	}
}

// bootBox boots a systemd box with sdbox up UPARGS (the box directory is
// added last) and takes it down when the test ends or the test binary is
// interrupted. Its directory names this process, so that a later run can
// tear down what an interrupted one left behind (cleanStaleBoxes);
// SODA_E2E_KEEP leaves it up for a look.
func bootBox(t *testing.T, sdbox string, upArgs ...string) *box {
	t.Helper()
	cleanStaleBoxes(t, sdbox)
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("soda-e2e-box.%d", os.Getpid()))
	down := func() {
		if out, err := exec.Command(sdbox, "down", dir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: sdbox down: %v\n%s", err, out)
		}
	}
	stop := onSignal(down)
	t.Cleanup(func() {
		stop()
		if os.Getenv("SODA_E2E_KEEP") != "" {
			t.Logf("SODA_E2E_KEEP: the box stays up; run: %s down %s", sdbox, dir)
			return
		}
		down()
	})
	up := exec.Command(sdbox, append(append([]string{"up"}, upArgs...), dir)...)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("sdbox up: %v\n%s", err, out)
	}
	return &box{sdbox: sdbox, dir: dir}
}
