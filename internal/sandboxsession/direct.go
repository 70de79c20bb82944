package sandboxsession

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/sandbox"
)

// Direct is the Backend of the sandbox engine in this process (sodactl
// sandbox mcp without sodad, as sodactl run --direct).
type Direct struct {
	// Engine starts the sandboxes.
	Engine *sandbox.Linux
	// Template is each sandbox's spec: network, limits, degradable
	// layers, fixed when the server starts. ID, Persistent, Home and
	// WorkspaceSize are set per sandbox.
	Template sandbox.Spec
	// HomeDir is where the sandboxes' (empty) home directories are made
	// and removed (empty: the engine's state directory; never /tmp). A
	// home is locked while its sandbox lives, so that a later start of
	// any soda binary removes what a killed server left (see
	// (*sandbox.Linux).NewHome).
	HomeDir string
}

// Mode implements Backend.
func (d *Direct) Mode() string { return "direct" }

// Start implements Backend.
func (d *Direct) Start(ctx context.Context, quota int64) (Box, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "session-" + hex.EncodeToString(b[:])
	home, err := d.Engine.NewHome(d.HomeDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox home: %w", err)
	}
	spec := d.Template
	spec.ID, spec.Persistent, spec.Home, spec.WorkspaceSize, spec.Dir = id, true, home, quota, ""
	spec.Argv = nil
	sb, err := d.Engine.Start(ctx, spec)
	if err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	bx := &directBox{id: id, sb: sb, home: home, done: make(chan struct{})}
	go func() {
		_, _ = sb.Wait(context.Background())
		close(bx.done)
	}()
	return bx, nil
}

type directBox struct {
	id   string
	sb   *sandbox.Sandbox
	home string
	once sync.Once
	done chan struct{}
}

func (b *directBox) ID() string { return b.id }

// Exec implements Box.
func (b *directBox) Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error) {
	return withPipes(stdin, stdout, stderr, func(in, out, errOut *os.File) (ExitStatus, error) {
		// EndOthers: nothing the command started outlives the call.
		st, err := b.sb.Exec(ctx, sandbox.ExecSpec{Argv: argv, Dir: dir, Timeout: timeout, Stdin: in, Stdout: out, Stderr: errOut, EndOthers: true})
		return ExitStatus{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut, MemoryKills: st.MemoryKills, TasksRefused: st.TasksRefused,
			WorkspaceFull: st.WorkspaceFull}, err
	})
}

// withPipes runs run with pipes for the command's streams, copied from
// stdin and to stdout and stderr while it runs (in is nil without stdin).
// Once run returns, the output is read until its end, at most 2 s more:
// a background process the command left holding its stdout must not hold
// the call, and what it writes later goes nowhere.
func withPipes(stdin io.Reader, stdout, stderr io.Writer, run func(in, out, errOut *os.File) (ExitStatus, error)) (ExitStatus, error) {
	var copies sync.WaitGroup
	var closeAfter []*os.File
	var seals []*sealWriter
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
		for _, s := range seals {
			s.seal()
		}
	}()
	pipeOut := func(dst io.Writer) (*os.File, error) {
		w := &sealWriter{w: dst}
		seals = append(seals, w)
		r, wf, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		closeAfter = append(closeAfter, wf)
		copies.Add(1)
		go func() {
			defer copies.Done()
			defer r.Close()
			_, _ = io.Copy(w, r)
		}()
		return wf, nil
	}
	out, err := pipeOut(stdout)
	if err != nil {
		return ExitStatus{}, err
	}
	errOut, err := pipeOut(stderr)
	if err != nil {
		return ExitStatus{}, err
	}
	var in *os.File
	if stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return ExitStatus{}, err
		}
		closeAfter = append(closeAfter, r)
		in = r
		go func() {
			_, _ = io.Copy(w, stdin)
			w.Close()
		}()
	}
	st, err := run(in, out, errOut)
	// Our copies of the write ends go; the readers end when the
	// command's (and whatever it left running with them) are closed too.
	out.Close()
	errOut.Close()
	waitCopies(&copies, 2*time.Second)
	return st, err
}

// sealWriter passes writes on until sealed, then drops them: what a
// background process writes after the call returned goes nowhere.
type sealWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *sealWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

func (s *sealWriter) seal() {
	s.mu.Lock()
	s.w = nil
	s.mu.Unlock()
}

// waitCopies waits for the output copies, at most d: a background process
// the command left holding its stdout must not hold the call.
func waitCopies(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Close implements Box.
func (b *directBox) Close(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		err = b.sb.Close(ctx)
		select {
		case <-b.done:
		case <-ctx.Done():
			b.sb.Stop()
			<-b.done
		}
		// The engine removed the home at the sandbox's teardown.
	})
	return err
}
