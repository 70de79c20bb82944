package validated

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandboxsession"
	"github.com/soda-project/soda/internal/validate"
	"github.com/soda-project/soda/internal/version"
)

// fakeEngine is a sandboxEngine whose sandboxes run nothing: the tar of
// the sources succeeds, and the validator's run is validator's answer.
type fakeEngine struct {
	// startErr fails each sandbox's start; closeErr each one's Close.
	startErr, closeErr error
	// validator answers a validator's run: its status, its output, an
	// error of the backend. Nil: exit status 0, no output.
	validator func(ctx context.Context, timeout time.Duration) (sandboxsession.ExitStatus, string, error)
	// running, when set, is sent on as a validator's run begins.
	running chan struct{}

	mu                    sync.Mutex
	made, closed, swept   bool
	tmpl                  sandbox.Spec
	home                  string
	starts, closes, execs int
}

func (e *fakeEngine) Backend(tmpl sandbox.Spec, homeDir string) sandboxsession.Backend {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tmpl, e.home = tmpl, homeDir
	return fakeBackend{e}
}

func (e *fakeEngine) SweepLeftovers(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.swept = true
	return nil, nil
}

func (e *fakeEngine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return nil
}

// newEngine is e as newLinuxEngine, failing with err when it is set.
func (e *fakeEngine) newEngine(err error) func(*slog.Logger) (sandboxEngine, error) {
	return func(*slog.Logger) (sandboxEngine, error) {
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.made = true
		return e, nil
	}
}

// engineState is what a fakeEngine saw.
type engineState struct {
	made, closed, swept   bool
	tmpl                  sandbox.Spec
	home                  string
	starts, closes, execs int
}

// state is what e saw, read under its lock.
func (e *fakeEngine) state() engineState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return engineState{made: e.made, closed: e.closed, swept: e.swept, tmpl: e.tmpl, home: e.home, starts: e.starts, closes: e.closes, execs: e.execs}
}

type fakeBackend struct{ e *fakeEngine }

func (b fakeBackend) Mode() string { return "fake" }

func (b fakeBackend) Start(ctx context.Context, quota int64) (sandboxsession.Box, error) {
	b.e.mu.Lock()
	defer b.e.mu.Unlock()
	if b.e.startErr != nil {
		return nil, b.e.startErr
	}
	b.e.starts++
	return fakeBox(b), nil
}

type fakeBox struct{ e *fakeEngine }

func (x fakeBox) ID() string { return "fake-box" }

func (x fakeBox) Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (sandboxsession.ExitStatus, error) {
	if argv[0] == "tar" {
		_, err := io.Copy(io.Discard, stdin)
		return sandboxsession.ExitStatus{}, err
	}
	x.e.mu.Lock()
	x.e.execs++
	x.e.mu.Unlock()
	if x.e.running != nil {
		x.e.running <- struct{}{}
	}
	if x.e.validator == nil {
		return sandboxsession.ExitStatus{}, nil
	}
	st, out, err := x.e.validator(ctx, timeout)
	_, _ = io.WriteString(stdout, out)
	return st, err
}

func (x fakeBox) Close(ctx context.Context) error {
	x.e.mu.Lock()
	defer x.e.mu.Unlock()
	x.e.closes++
	return x.e.closeErr
}

// syncBuffer is a bytes.Buffer safe for the logger's and the test's
// goroutines.
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

// fakeConf is a kind whose validator is /bin/true (digested, never run).
const fakeConf = "[Validator]\nExecStart=/bin/true %FILES%\nFiles=*.sh\n[Limits]\nDeadline=2s\nMemoryMax=256M\n"

// dirs writes kind fake's configuration (conf) and returns the
// configuration and state directories' options.
func dirs(t *testing.T, conf string) []string {
	t.Helper()
	cfg, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "fake.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--config-dir", cfg, "--state-dir", state}
}

// noServiceManager makes the test process look started by hand: no
// readiness notification, no socket activation.
func noServiceManager(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("LISTEN_PID", "")
	t.Setenv("LISTEN_FDS", "")
}

// TestArguments: a command line that is wrong exits 2 with what is wrong,
// before any engine is made; --version prints it and exits 0.
func TestArguments(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		{"version", []string{"--version"}, 0, "soda-validated " + version.Version + "\n", nil},
		{"no kind", nil, 2, "", []string{"soda-validated: name one KIND (its configuration is DIR/KIND.conf)\n"}},
		{"two kinds", []string{"a", "b"}, 2, "", []string{"name one KIND"}},
		{"unknown transport", []string{"--transport", "tcp", "fake"}, 2, "", []string{"soda-validated: --transport tcp: stdio or http\n"}},
		{"zero idle", []string{"--session-idle", "0s", "fake"}, 2, "", []string{"soda-validated: --session-idle 0s: a positive duration such as 15m\n"}},
		{"negative idle", []string{"--session-idle=-1m", "fake"}, 2, "", []string{"--session-idle -1m0s: a positive duration"}},
		{"idle not a duration", []string{"--session-idle", "soon", "fake"}, 2, "", []string{`invalid value "soon" for flag -session-idle`, "Usage: soda-validated"}},
		{"unknown flag", []string{"--bogus", "fake"}, 2, "", []string{"flag provided but not defined: -bogus", "Usage: soda-validated [OPTIONS] KIND"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &fakeEngine{}
			var stdout, stderr syncBuffer
			code := mainWith(t.Context(), e.newEngine(nil), tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.wantStdout)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q, want it to say %q", stderr.String(), w)
				}
			}
			if e.state().made {
				t.Error("an engine was made for a command line that is refused")
			}
		})
	}
}

// TestStartFailures: what fails before serving exits 1, saying what
// failed, and closes what was opened (the engine, the spare sandbox).
func TestStartFailures(t *testing.T) {
	tests := []struct {
		name      string
		conf      string   // fake.conf ("": none)
		args      []string // after the directories
		engineErr error
		holdOwner bool // another worker holds the owner directory
		want      []string
		wantMade  bool // the engine was made (and must be closed)
	}{
		{name: "no configuration", args: []string{"fake"}, want: []string{"soda-validated: validator kind fake: open ", "fake.conf: no such file or directory"}},
		{name: "bad kind name", conf: fakeConf, args: []string{"../fake"}, want: []string{`soda-validated: validator kind "../fake"`}},
		{name: "bad configuration", conf: "[Validator]\nExecStart=/bin/true\nFiles=*.sh\n", args: []string{"fake"}, want: []string{"fake.conf", "no %FILES% argument"}},
		{name: "bad degraded layers", conf: fakeConf, args: []string{"--allow-degraded", "gravity", "fake"}, want: []string{"soda-validated: --allow-degraded: ", "gravity"}},
		{name: "no engine", conf: fakeConf, args: []string{"fake"}, engineErr: errors.New("sandbox engine: no user namespaces"), want: []string{"soda-validated: sandbox engine: no user namespaces\n"}},
		{name: "owner held", conf: fakeConf, args: []string{"fake"}, holdOwner: true, wantMade: true, want: []string{"is held by another soda-validated of kind fake"}},
		{name: "validator missing", conf: strings.Replace(fakeConf, "/bin/true", "/nonexistent/validator", 1), args: []string{"fake"}, wantMade: true, want: []string{"soda-validated: ", "/nonexistent/validator"}},
		{name: "http without an address", conf: fakeConf, args: []string{"--transport", "http", "fake"}, wantMade: true, want: []string{"soda-validated: --transport http needs --listen 127.0.0.1:PORT (or systemd's socket)\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noServiceManager(t)
			cfg, state := t.TempDir(), t.TempDir()
			if tt.conf != "" {
				if err := os.WriteFile(filepath.Join(cfg, "fake.conf"), []byte(tt.conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.holdOwner {
				o, err := validate.OpenOwner(state, "fake", false)
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
			}
			e := &fakeEngine{}
			var stdout, stderr syncBuffer
			args := append([]string{"--config-dir", cfg, "--state-dir", state}, tt.args...)
			code := mainWith(t.Context(), e.newEngine(tt.engineErr), args, strings.NewReader(""), &stdout, &stderr)
			if code != 1 {
				t.Errorf("exit status %d, want 1 (stderr %q)", code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q, want it to say %q", stderr.String(), w)
				}
			}
			if stdout.String() != "" {
				t.Errorf("stdout %q: it is JSON-RPC only", stdout.String())
			}
			st := e.state()
			if st.made != tt.wantMade || st.closed != tt.wantMade || st.starts != st.closes {
				t.Errorf("engine made %v, closed %v, %d sandboxes started, %d closed; want made and closed %v, all closed", st.made, st.closed, st.starts, st.closes, tt.wantMade)
			}
		})
	}
}

// client runs soda-validated on stdio with e until ctx ends and returns
// an MCP client of it; wait, closeStdin, ends the client first (stdin
// ends), and returns the exit status and standard error.
func client(ctx context.Context, t *testing.T, e *fakeEngine, args []string) (cs *mcp.ClientSession, wait func(closeStdin bool) (int, string)) {
	t.Helper()
	noServiceManager(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		c := mainWith(ctx, e.newEngine(nil), args, inR, outW, &stderr)
		outW.Close()
		code <- c
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "test"}, nil).Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect: %v (stderr %q)", err, stderr.String())
	}
	t.Cleanup(func() { _ = cs.Close() })
	wait = func(closeStdin bool) (int, string) {
		if closeStdin {
			_ = cs.Close()
		}
		select {
		case c := <-code:
			return c, stderr.String()
		case <-time.After(10 * time.Second):
			t.Fatalf("soda-validated still runs after 10 s (stderr %q)", stderr.String())
			return 0, ""
		}
	}
	return cs, wait
}

// TestValidateCalls: what the sandbox backend answers (the validator's
// status and output, a failure to start, run or clean up) maps to the
// validate tool's verdict, isError and text over stdio; a refused request
// is an error result; and the worker stops cleanly when stdin ends (exit
// 0, every sandbox closed, the engine closed).
func TestValidateCalls(t *testing.T) {
	status := func(code int, out string) func(context.Context, time.Duration) (sandboxsession.ExitStatus, string, error) {
		return func(context.Context, time.Duration) (sandboxsession.ExitStatus, string, error) {
			return sandboxsession.ExitStatus{Code: code}, out, nil
		}
	}
	const oneFile = `{"files":[{"path":"a.sh","content":"echo hi\n"}]}`
	tests := []struct {
		name      string
		engine    fakeEngine
		args      string
		wantError bool // isError
		// wantStatus and wantVerdict are the structured verdict's ("": no
		// structured verdict, no validator run).
		wantStatus, wantVerdict string
		wantText                []string
		wantPoison              bool // the owner record is poisoned after
	}{
		{name: "valid", args: oneFile, wantStatus: validate.StatusValid, wantVerdict: "valid",
			wantText: []string{"fake: valid, verdict valid (0 diagnostics, untrusted; clean-up clean)\n"}},
		{name: "invalid", engine: fakeEngine{validator: status(1, "a.sh:1:6: warning: quote this [SC2086]\n")}, args: oneFile,
			wantStatus: validate.StatusInvalid, wantVerdict: "invalid",
			wantText: []string{"fake: invalid, verdict invalid (1 diagnostics, untrusted; clean-up clean)\na.sh:1:6: warning: quote this [SC2086]\n"}},
		{name: "invalid without a diagnostic", engine: fakeEngine{validator: status(1, "")}, args: oneFile, wantError: true,
			wantStatus: validate.StatusMalformed, wantText: []string{"fake: malformed-output (0 diagnostics"}},
		{name: "crash", engine: fakeEngine{validator: status(139, "")}, args: oneFile, wantError: true,
			wantStatus: validate.StatusCrashed, wantText: []string{"fake: crashed ("}},
		{name: "deadline", args: oneFile, wantError: true, wantStatus: validate.StatusDeadline,
			engine: fakeEngine{validator: func(context.Context, time.Duration) (sandboxsession.ExitStatus, string, error) {
				return sandboxsession.ExitStatus{Code: -1, Signal: "SIGKILL", TimedOut: true}, "", nil
			}},
			wantText: []string{"fake: deadline (1 diagnostics", "the validator did not finish within 2s"}},
		{name: "backend fails the run", args: oneFile, wantError: true, wantStatus: validate.StatusFailed,
			engine: fakeEngine{validator: func(context.Context, time.Duration) (sandboxsession.ExitStatus, string, error) {
				return sandboxsession.ExitStatus{}, "", errors.New("exec in sandbox: init gone")
			}},
			wantText: []string{"fake: failed (1 diagnostics", "the validator could not run: exec in sandbox: init gone"}},
		{name: "sandbox does not start", engine: fakeEngine{startErr: errors.New("start sandbox: cgroup busy")}, args: oneFile, wantError: true,
			wantStatus: validate.StatusFailed, wantText: []string{"the sandbox could not start: start sandbox: cgroup busy"}},
		{name: "clean-up fails", engine: fakeEngine{closeErr: errors.New("remove cgroup: device busy")}, args: oneFile,
			wantStatus: validate.StatusValid, wantVerdict: "valid", wantPoison: true,
			wantText: []string{"fake: valid, verdict valid (0 diagnostics, untrusted; clean-up failed: remove cgroup: device busy)"}},
		{name: "refused file", args: `{"files":[{"path":"a.txt","content":"x"}]}`, wantError: true,
			wantText: []string{"refused: a.txt: kind fake takes only *.sh"}},
		{name: "refused path", args: `{"files":[{"path":"-rf.sh","content":"x"}]}`, wantError: true,
			wantText: []string{`refused: path "-rf.sh": a segment begins with "-"`}},
		{name: "no files", args: `{"files":[]}`, wantError: true, wantText: []string{"refused: 0 files: 1 to 8 per call"}},
		{name: "arguments not the schema", args: `{"files":"a.sh"}`, wantError: true, wantText: []string{"files"}},
	}
	for i := range tests {
		tt := &tests[i] // not a copy: a fakeEngine holds a mutex
		t.Run(tt.name, func(t *testing.T) {
			e := &tt.engine
			args := append(dirs(t, fakeConf), "fake")
			cs, wait := client(t.Context(), t, e, args)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "validate", Arguments: json.RawMessage(tt.args)})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					text.WriteString(tc.Text)
				}
			}
			if res.IsError != tt.wantError {
				t.Errorf("isError %v, want %v (%s)", res.IsError, tt.wantError, text.String())
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text.String(), w) {
					t.Errorf("text %q\nwant it to hold %q", text.String(), w)
				}
			}
			var v validate.Verdict
			if res.StructuredContent != nil {
				raw, _ := json.Marshal(res.StructuredContent)
				if err := json.Unmarshal(raw, &v); err != nil {
					t.Fatalf("verdict %s: %v", raw, err)
				}
			}
			verdict := ""
			if v.Verdict != nil {
				verdict = *v.Verdict
			}
			if v.Status != tt.wantStatus || verdict != tt.wantVerdict || v.Completed != (tt.wantVerdict != "") {
				t.Errorf("status %q, verdict %q, completed %v; want %q, %q", v.Status, verdict, v.Completed, tt.wantStatus, tt.wantVerdict)
			}
			if tt.wantStatus != "" && (v.Kind != "fake" || v.Limits.Network != "none" || v.Limits.MemoryMax != 256<<20 || v.Limits.DeadlineSeconds != 2) {
				t.Errorf("verdict of kind %q, limits %+v: want the kind's", v.Kind, v.Limits)
			}
			// A refused request never reaches a sandbox.
			wantRuns := 0
			if tt.wantStatus != "" && e.startErr == nil {
				wantRuns = 1
			}
			if got := e.state().execs; got != wantRuns {
				t.Errorf("the validator ran %d times, want %d", got, wantRuns)
			}
			if tt.wantPoison {
				// The next call is refused, and the record says why.
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "validate", Arguments: json.RawMessage(oneFile)})
				if err != nil {
					t.Fatal(err)
				}
				if tc, ok := res.Content[0].(*mcp.TextContent); !res.IsError || !ok || !strings.HasPrefix(tc.Text, "poisoned: ") {
					t.Errorf("the call after a failed clean-up: isError %v, %#v; want it refused, poisoned", res.IsError, res.Content[0])
				}
			}
			code, stderr := wait(true)
			if code != 0 {
				t.Errorf("exit status %d after stdin ended, want 0 (stderr %q)", code, stderr)
			}
			st := e.state()
			if !st.closed || !st.swept || st.starts != st.closes {
				t.Errorf("engine swept %v, closed %v; %d sandboxes started, %d closed: want all closed", st.swept, st.closed, st.starts, st.closes)
			}
			if !st.tmpl.NoNetwork || st.tmpl.Limits.MemoryMax != 256<<20 || !strings.HasSuffix(st.home, filepath.Join("fake", "tmp")) {
				t.Errorf("sandboxes of spec %+v, homes in %q: want no network, the kind's limits, the owner's tmp", st.tmpl, st.home)
			}
			rec, err := os.ReadFile(filepath.Join(args[3], "fake", "owner.json"))
			if err != nil {
				t.Fatal(err)
			}
			if poisoned := strings.Contains(string(rec), `"poisoned"`); poisoned != tt.wantPoison {
				t.Errorf("owner record %s: poisoned %v, want %v", rec, poisoned, tt.wantPoison)
			}
		})
	}
}

// TestCancelled: when its context ends (as on SIGTERM) with stdin still
// open, soda-validated stops with status 0: idle at once, and with a call
// in progress only once that call's validator and its sandbox are done.
func TestCancelled(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			stopped := make(chan error, 1)
			e := &fakeEngine{running: make(chan struct{}, 1), validator: func(ctx context.Context, timeout time.Duration) (sandboxsession.ExitStatus, string, error) {
				select {
				case <-ctx.Done():
					stopped <- ctx.Err()
					return sandboxsession.ExitStatus{}, "", ctx.Err()
				case <-time.After(timeout):
					stopped <- nil
					return sandboxsession.ExitStatus{TimedOut: true}, "", nil
				}
			}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cs, wait := client(ctx, t, e, append(dirs(t, fakeConf), "fake"))
			callDone := make(chan struct{})
			if busy {
				go func() {
					defer close(callDone)
					_, _ = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "validate", Arguments: json.RawMessage(`{"files":[{"path":"a.sh","content":"sleep 1\n"}]}`)})
				}()
				select {
				case <-e.running:
				case <-time.After(5 * time.Second):
					t.Fatal("the validator never ran")
				}
			} else {
				close(callDone)
			}
			start := time.Now()
			cancel()
			code, stderr := wait(false)
			if code != 0 {
				t.Errorf("exit status %d, want 0 (stderr %q)", code, stderr)
			}
			if busy {
				select {
				case <-stopped:
				default:
					t.Error("soda-validated ended before the call in progress")
				}
			} else if d := time.Since(start); d > 2*time.Second {
				t.Errorf("an idle worker took %s to stop", d)
			}
			<-callDone
			st := e.state()
			if !st.closed || st.starts != st.closes {
				t.Errorf("engine closed %v; %d sandboxes started, %d closed: want all closed", st.closed, st.starts, st.closes)
			}
		})
	}
}
