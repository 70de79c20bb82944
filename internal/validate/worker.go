package validate

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// Errors of a call that did not run.
var (
	// ErrBusy: another call runs; there is no queue.
	ErrBusy = errors.New("busy: the worker runs one call at a time; try again when it is done")
	// ErrPoisoned: a clean-up failed; an operator must resolve it.
	ErrPoisoned = errors.New("poisoned: a previous call's clean-up failed; the worker refuses work until an operator restarts it after checking")
	// ErrClosed: the worker is stopping.
	ErrClosed = errors.New("closed: the worker is stopping")
)

// Worker runs one kind's validator, one call at a time.
type Worker struct {
	metrics Metrics
	kind    *Kind
	backend sandboxsession.Backend
	log     *slog.Logger
	tool    *tool  // the validator's binary and trees, digested at start
	owner   *Owner // where poisoning is recorded (nil: memory only)
	// settle is how long past its deadline a call may take to settle
	// (sandbox start, clean-up) before Healthy calls it wedged.
	settle time.Duration

	// spare is the next call's sandbox, started as the previous call
	// takes its own (fresh each time, never reused; it waits in the
	// closed network with nothing in it, its own sandbox beside the
	// call's), so that a call does not wait for one to start, even right
	// after another. spareOut says one was started and not taken yet: at
	// most one is ever on its way. Both are the holder of sem's.
	spare    chan spareBox
	spareOut bool

	// sem is held for a whole call and its clean-up, and by Close.
	sem chan struct{}

	mu        sync.Mutex // guards what follows
	poisoned  string
	closed    bool
	callStart time.Time // of the call holding sem; zero when none
}

// DefaultSettle is how long past its deadline a call may take to settle:
// the run's own margin (30 s), the clean-up's bound (30 s) and as much
// again.
const DefaultSettle = 90 * time.Second

// NewWorker returns the worker of kind k on backend b (a closed-network
// sandbox backend with the kind's limits). It reads the validator's
// digest now, of its binary and its ReadOnlyPaths trees: one changed later
// fails each call until a restart. A worker whose
// owner record is poisoned starts no sandbox and refuses every call.
func NewWorker(k *Kind, b sandboxsession.Backend, owner *Owner, log *slog.Logger) (*Worker, error) {
	binary := k.Command[0]
	if k.ImageRoot != "" {
		binary = filepath.Join(k.ImageRoot, k.Command[0])
	}
	tl, err := newToolIn(k.ImageDigest, binary, k.Command[0], k.ReadOnlyPaths)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{metrics: noMetrics{}, kind: k, backend: b, log: log, tool: tl, owner: owner, settle: DefaultSettle,
		spare: make(chan spareBox, 1), sem: make(chan struct{}, 1)}
	if owner != nil {
		w.poisoned = owner.Poisoned()
	}
	if w.poisoned == "" {
		w.startSpare()
	}
	return w, nil
}

type spareBox struct {
	box sandboxsession.Box
	err error
}

// startSpare starts the next call's sandbox in the background; the
// caller holds sem (or is NewWorker).
func (w *Worker) startSpare() {
	w.spareOut = true
	go func() {
		box, err := w.backend.Start(context.Background(), workspaceSize)
		w.spare <- spareBox{box, err} // never blocks: one spare at a time
	}()
}

// WaitSpare waits until the first call's sandbox has started (or failed
// to), at most until ctx ends; a poisoned worker has none to wait for.
// It is part of the worker's recovery, before it reports ready.
func (w *Worker) WaitSpare(ctx context.Context) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-w.sem }()
	if !w.spareOut {
		return nil
	}
	select {
	case sp := <-w.spare:
		w.spare <- sp // still the next call's
		if sp.err != nil {
			return fmt.Errorf("the first sandbox did not start: %w", sp.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the first sandbox has not started: %w", ctx.Err())
	}
}

// Close stops admission, waits for a call in progress and its clean-up,
// and ends the spare sandbox, each at most until ctx ends. A spare that
// has not started by then is closed when it does.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("a call is still running: %w", ctx.Err())
	}
	defer func() { <-w.sem }()
	return w.dropSpare(ctx)
}

// dropSpare ends the spare of a worker that takes no more calls, waiting
// for it to start at most until ctx ends; one that starts later is
// closed when it does. The caller holds sem.
func (w *Worker) dropSpare(ctx context.Context) error {
	if !w.spareOut {
		return nil // none, or it was taken
	}
	w.spareOut = false
	closeBox := func(ctx context.Context, box sandboxsession.Box) error {
		if err := box.Close(ctx); err != nil {
			return fmt.Errorf("close the spare sandbox %s: %w", box.ID(), err)
		}
		return nil
	}
	select {
	case sp := <-w.spare:
		if sp.box == nil {
			return nil
		}
		return closeBox(ctx, sp.box)
	case <-ctx.Done():
		go func() {
			if sp := <-w.spare; sp.box != nil {
				cctx, cancel := context.WithTimeout(context.Background(), cleanupBound)
				defer cancel()
				if err := closeBox(cctx, sp.box); err != nil {
					w.log.Error("close the spare sandbox that started after the worker stopped taking calls", "err", err)
				}
			}
		}()
		return fmt.Errorf("the spare sandbox has not started yet (it is closed when it does): %w", ctx.Err())
	}
}

// workspaceSize is each call's workspace: the sources and some room.
const workspaceSize = 1<<20 + MaxAllBytes*2

// binID is what identifies a file's contents cheaply: device, inode,
// size, modification and change times.
type binID struct {
	dev, ino, size uint64
	mtime, ctime   int64
}

func statID(p string) binID {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return binID{}
	}
	return binID{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// Poisoned says why the worker refuses work: a failed or uncertain
// clean-up, or "closed" once it stops; "" when it does not.
func (w *Worker) Poisoned() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.poisoned == "" && w.closed {
		return "closed"
	}
	return w.poisoned
}

// poison makes the worker refuse work from now on, recorded in the owner
// record so that a restart refuses too.
func (w *Worker) poison(why string) {
	w.mu.Lock()
	first := w.poisoned == ""
	if first {
		w.poisoned = why
	}
	w.mu.Unlock()
	if !first {
		return
	}
	w.metrics.CleanupFailed()
	if w.owner != nil {
		if err := w.owner.Poison(why); err != nil {
			w.log.Error("record the poisoning", "err", err)
		}
	}
	w.log.Error("the worker is poisoned: it refuses work until an operator checks and starts it with --reconcile", "kind", w.kind.Name, "why", why)
}

// Healthy is the watchdog's question: false while a call has not settled
// long after its deadline (the kind's deadline and the worker's settle
// time), which also poisons the worker, its clean-up being uncertain.
func (w *Worker) Healthy() bool {
	start := w.callStarted()
	if start.IsZero() || time.Since(start) <= w.kind.Deadline+w.settle {
		return true
	}
	w.poison(fmt.Sprintf("a call has not settled %s after it started (deadline %s): its sandbox's clean-up is uncertain", time.Since(start).Round(time.Second), w.kind.Deadline))
	return false
}

// callStarted is when the call in progress started (zero: none).
func (w *Worker) callStarted() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.callStart
}

func (w *Worker) setCallStart(t time.Time) {
	w.mu.Lock()
	w.callStart = t
	w.mu.Unlock()
}

// refusal is why no call may start ("" when one may).
func (w *Worker) refusal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.poisoned != "":
		return fmt.Errorf("%w (%s)", ErrPoisoned, w.poisoned)
	case w.closed:
		return ErrClosed
	}
	return nil
}

// SetMetrics makes the worker record its calls (before the first one).
func (w *Worker) SetMetrics(m Metrics) {
	if m == nil {
		m = noMetrics{}
	}
	w.metrics = m
}

// Metrics is what a Worker counts; internal/metrics's Validator
// implements it.
type Metrics interface {
	Done(status string, d time.Duration)
	Busy()
	CleanupFailed()
}

// noMetrics is Metrics off.
type noMetrics struct{}

func (noMetrics) Done(string, time.Duration) {}
func (noMetrics) Busy()                      {}
func (noMetrics) CleanupFailed()             {}

// Kind returns the worker's kind.
func (w *Worker) Kind() *Kind { return w.kind }

// Validate checks files, runs the validator on them in a new sandbox and
// returns the verdict. A refused request is a *RefusedError, a second call
// while one runs ErrBusy, any call after a failed clean-up ErrPoisoned;
// everything else is a Verdict (completed or not).
//
// Its phases: admission, the verdict's fixed part, the validator checked
// against its digest, the spare sandbox taken, the sources written into
// it, the validator's run and the verdict from its exit. Deferred, last
// first: the sandbox's clean-up, the next spare's start, the verdict
// sealed.
func (w *Worker) Validate(ctx context.Context, files []File) (*Verdict, error) {
	release, err := w.admit(files)
	if err != nil {
		return nil, err
	}
	defer release()
	start := time.Now()
	w.setCallStart(start)
	defer w.setCallStart(time.Time{})
	v := w.newVerdict(files)
	defer w.seal(v, start)
	if err := w.tool.check(); err != nil {
		v.fail(StatusFailed, err.Error()+": the verdict would not be the attested validator's; restart the worker")
		return v, nil
	}

	// The sandbox lives for this call, whatever the client does: its
	// context is not the call's (a bare disconnect leaves the work
	// supervised to its end; the deadline bounds it).
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.kind.Deadline+runMargin)
	defer cancel()
	// After this call's clean-up (defers run last first).
	defer w.settleSpare()
	box, err := w.takeSpare(ctx, runCtx)
	if err != nil {
		v.fail(StatusFailed, err.Error())
		return v, nil
	}
	// The next call's sandbox starts beside this one's.
	if w.refusal() == nil {
		w.startSpare()
	}
	defer w.closeBox(box, v)
	names, err := writeSources(runCtx, box, files)
	if err != nil {
		v.fail(StatusFailed, err.Error())
		return v, nil
	}
	st, out, err := w.runValidator(ctx, runCtx, box, names)
	switch {
	case ctx.Err() != nil:
		v.fail(StatusCancelled, "the call was cancelled: the validator was stopped")
		return v, nil
	case err != nil:
		v.fail(StatusFailed, "the validator could not run: "+err.Error())
		return v, nil
	case st.TimedOut:
		v.fail(StatusDeadline, fmt.Sprintf("the validator did not finish within %s", w.kind.Deadline))
		return v, nil
	}
	w.judge(v, st, out)
	return v, nil
}

// runMargin is how long past the kind's deadline a call's sandbox may
// take to start and to run, and cleanupBound how long its clean-up may
// take.
const (
	runMargin    = 30 * time.Second
	cleanupBound = 30 * time.Second
)

// admit checks files and takes the worker for one call: a refused
// request, a busy, poisoned or closed worker is the error. release gives
// the worker back.
func (w *Worker) admit(files []File) (release func(), err error) {
	if err := CheckFiles(w.kind, files); err != nil {
		return nil, err
	}
	select {
	case w.sem <- struct{}{}:
	default:
		w.metrics.Busy()
		return nil, ErrBusy
	}
	release = func() { <-w.sem }
	if err := w.refusal(); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// newVerdict is a call's verdict before the run: the kind, its limits,
// the digests of the sources, the configuration and the validator, and
// a clean clean-up until one fails.
func (w *Worker) newVerdict(files []File) *Verdict {
	k := w.kind
	v := &Verdict{Kind: k.Name, Untrusted: true, Diagnostics: []Diagnostic{}, Cleanup: "clean",
		Limits: Limits{MemoryMax: k.MemoryMax, TasksMax: k.TasksMax, CPUQuotaPercent: k.CPUPercent, DeadlineSeconds: int64(k.Deadline / time.Second),
			TmpSize: k.TmpSize, HomeSize: k.HomeSize, Network: "none"}}
	v.Digests.Sources, v.Digests.All = digests(files)
	v.Digests.Config, v.Digests.Validator = k.Digest, w.tool.digest
	v.Digests.ValidatorBinary, v.Digests.ValidatorTrees = w.tool.binarySum, w.tool.treeSums()
	v.Digests.Image = w.tool.image
	return v
}

// seal completes v once the call is over, its clean-up included: its
// duration since start, its attestation, and the call's metrics.
func (w *Worker) seal(v *Verdict, start time.Time) {
	v.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	v.Attestation = statement(v, w.kind)
	w.metrics.Done(v.Status, time.Since(start))
}

// fail ends v's call with status and one diagnostic that says why.
func (v *Verdict) fail(status, why string) {
	v.Status = status
	v.Diagnostics = append(v.Diagnostics, Diagnostic{Message: why})
}

// settleSpare, after a call's clean-up, starts the next call's sandbox
// when none is on its way (this call had none to take), or ends the one
// on its way when the worker now refuses work (its clean-up failed, or
// it is closing). The caller holds sem.
func (w *Worker) settleSpare() {
	if w.refusal() != nil {
		ctx, cancel := context.WithTimeout(context.Background(), spareDropWait)
		defer cancel()
		if err := w.dropSpare(ctx); err != nil {
			w.log.Warn("the worker refuses work: its spare sandbox", "kind", w.kind.Name, "err", err)
		}
		return
	}
	if !w.spareOut {
		w.startSpare()
	}
}

// spareDropWait is how long a call that leaves its worker refusing work
// waits for the spare to start, to end it; later, it ends when it starts.
const spareDropWait = 5 * time.Second

// takeSpare takes the spare sandbox for this call. The spare may still
// be starting, or hang: it waits no longer than the call (ctx: a
// cancellation, its deadline) or the run's bound (runCtx); one that comes
// later is the next call's. The error's text is the verdict's diagnostic.
func (w *Worker) takeSpare(ctx, runCtx context.Context) (sandboxsession.Box, error) {
	var sp spareBox
	select {
	case sp = <-w.spare:
		w.spareOut = false
	case <-ctx.Done():
		return nil, fmt.Errorf("the call ended (%v) before its sandbox had started", context.Cause(ctx))
	case <-runCtx.Done():
		return nil, fmt.Errorf("no sandbox started within %s", w.kind.Deadline+runMargin)
	}
	if sp.err != nil {
		return nil, fmt.Errorf("the sandbox could not start: %w", sp.err)
	}
	return sp.box, nil
}

// closeBox ends this call's sandbox and checks that nothing of it is
// left; a failure is recorded in v and poisons the worker.
func (w *Worker) closeBox(box sandboxsession.Box, v *Verdict) {
	cctx, ccancel := context.WithTimeout(context.Background(), cleanupBound)
	defer ccancel()
	err := box.Close(cctx)
	if err == nil && w.owner != nil {
		// What the backend did not say: the sandbox's home must be
		// gone from the owner directory (where only the next spare's,
		// live and locked, may be).
		err = w.owner.CheckSettled()
	}
	if err != nil {
		v.Cleanup = "failed: " + err.Error()
		w.log.Error("validation sandbox clean-up failed", "kind", w.kind.Name, "sandbox", box.ID(), "err", err)
		w.poison(fmt.Sprintf("the clean-up of sandbox %s failed: %v", box.ID(), err))
	}
}

// sourcesTar is files as a tar stream, their directories first, and
// their paths in the order of files (the validator's arguments).
func sourcesTar(files []File) (*bytes.Buffer, []string) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	dirs := map[string]bool{}
	var names []string
	for _, f := range files {
		for d := path.Dir(f.Path); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
		names = append(names, f.Path)
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	slices.Sort(dl)
	for _, d := range dl {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)})
	}
	for _, f := range files {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: 0o644, Size: int64(len(f.Content)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write([]byte(f.Content))
	}
	_ = tw.Close()
	return &in, names
}

// writeSources writes files into box's workspace and returns their paths
// (the validator's arguments). The error's text is the verdict's
// diagnostic.
func writeSources(ctx context.Context, box sandboxsession.Box, files []File) ([]string, error) {
	in, names := sourcesTar(files)
	var tarErr bytes.Buffer
	if st, err := box.Exec(ctx, []string{"tar", "-x", "-f", "-", "-C", sandboxsession.Workspace}, sandboxsession.Workspace, in, &bytes.Buffer{}, &tarErr, 30*time.Second); err != nil || st.Code != 0 {
		return nil, fmt.Errorf("the sources could not be written into the sandbox: %v %s", err, strings.TrimSpace(tarErr.String()))
	}
	return names, nil
}

// runValidator runs the kind's validator on names in box, within the
// kind's deadline, and returns its status and first 256 KiB of output.
// An explicit cancellation of ctx (or the session's end) retires the
// work: the validator is killed; the worker stays taken until its
// sandbox is gone. A bare disconnect cancels nothing: the work runs to
// its end, bounded by runCtx.
func (w *Worker) runValidator(ctx, runCtx context.Context, box sandboxsession.Box, names []string) (sandboxsession.ExitStatus, string, error) {
	var out limitedBuffer
	out.max = 256 << 10
	execCtx, stopExec := context.WithCancel(runCtx)
	defer stopExec()
	go func() {
		select {
		case <-ctx.Done():
			stopExec()
		case <-execCtx.Done():
		}
	}()
	st, err := box.Exec(execCtx, w.kind.argv(names), sandboxsession.Workspace, nil, &out, &out, w.kind.Deadline)
	return st, out.String(), err
}

// judge is the verdict of a validator that ran to its exit: its exit
// code and diagnostics, and the status the kind's exit codes give it
// (valid, invalid; malformed: invalid without diagnostics; crashed: an
// exit code the kind does not name).
func (w *Worker) judge(v *Verdict, st sandboxsession.ExitStatus, out string) {
	k := w.kind
	code := st.Code
	v.ExitCode = &code
	v.Diagnostics, v.DiagnosticsTruncated = parseDiagnostics(k.Output, out)
	if v.Diagnostics == nil {
		v.Diagnostics = []Diagnostic{}
	}
	verdict := ""
	switch {
	case slices.Contains(k.ValidExit, code):
		verdict = StatusValid
	case slices.Contains(k.InvalidExit, code) && len(v.Diagnostics) == 0:
		v.Status = StatusMalformed
		return
	case slices.Contains(k.InvalidExit, code):
		verdict = StatusInvalid
	default:
		v.Status = StatusCrashed
		if st.MemoryKills > 0 || st.TasksRefused > 0 {
			v.Diagnostics = append(v.Diagnostics, Diagnostic{Message: fmt.Sprintf("the sandbox's limits struck: %d processes killed by the memory limit, %d forks refused", st.MemoryKills, st.TasksRefused)})
		}
		return
	}
	v.Completed, v.Verdict, v.Status = true, &verdict, verdict
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
