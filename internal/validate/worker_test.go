package validate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// fakeBackend is a sandboxsession.Backend for the worker's own logic: its
// sandboxes run nothing. Start blocks until release is closed (when set);
// each box's Close returns closeErr; home, when set, is a directory each
// box makes there, as the direct backend makes the sandbox's home, and
// removes on Close unless leaveHome.
type fakeBackend struct {
	release   chan struct{}
	closeErr  error
	home      string
	leaveHome bool
	// execBlock makes Exec of the validator (not tar) wait for it,
	// whatever its context says: a wedged sandbox.
	execBlock chan struct{}

	starts, closes atomic.Int32
	mu             sync.Mutex
	boxes          []*fakeBox
}

func (b *fakeBackend) Mode() string { return "fake" }

func (b *fakeBackend) Start(ctx context.Context, quota int64) (sandboxsession.Box, error) {
	b.starts.Add(1)
	if b.release != nil {
		<-b.release
	}
	box := &fakeBox{b: b}
	if b.home != "" {
		// A home as workhome makes one (Dir.try): the lock made and
		// held under a pending name, the directory, then the lock
		// renamed to its name, so that the check of what is left never
		// sees a live home without its lock, nor a lock not yet held.
		d := filepath.Join(b.home, fmt.Sprintf("home-%d", b.starts.Load()))
		lock, err := os.Create(d + ".pending")
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return nil, err
		}
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Rename(d+".pending", d+".lock"); err != nil {
			return nil, err
		}
		box.home, box.lock = d, lock
	}
	b.mu.Lock()
	b.boxes = append(b.boxes, box)
	b.mu.Unlock()
	return box, nil
}

type fakeBox struct {
	b      *fakeBackend
	home   string
	lock   *os.File
	closed atomic.Bool
}

func (x *fakeBox) ID() string { return "fake" }

func (x *fakeBox) Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (sandboxsession.ExitStatus, error) {
	if stdin != nil {
		_, _ = io.Copy(io.Discard, stdin)
	}
	if argv[0] != "tar" && x.b.execBlock != nil {
		<-x.b.execBlock
	}
	return sandboxsession.ExitStatus{}, nil
}

func (x *fakeBox) Close(ctx context.Context) error {
	x.closed.Store(true)
	x.b.closes.Add(1)
	if x.home != "" {
		if !x.b.leaveHome {
			_ = os.Remove(x.home)
			_ = os.Remove(x.home + ".lock")
		}
		x.lock.Close() // left: the lock is free, as a killed sandbox's
	}
	return x.b.closeErr
}

// fakeKind runs /bin/true (it is digested, never run).
func fakeKind() *Kind {
	return &Kind{Name: "fake", Path: "/etc/soda/validate/fake.conf", Command: []string{"/bin/true", FilesArg}, EndOfOptions: "--",
		Files: []string{"*.sh"}, Output: OutputGCC, ValidExit: []int{0}, InvalidExit: []int{1}, Deadline: time.Second}
}

var oneFile = []File{{Path: "a.sh", Content: "true\n"}}

// within runs f and fails t when it has not returned after d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still blocked after %s", what, d)
	}
}

// TestSpareStartHangs: the spare sandbox's start hangs. A call ends with
// its context (a failed status, not a block past its deadline), the
// worker stays usable (the next call is not refused busy and ends with its
// own context), Close is bounded by its context, and the spare that
// starts at last is closed, not leaked.
func TestSpareStartHangs(t *testing.T) {
	b := &fakeBackend{release: make(chan struct{})}
	w, err := NewWorker(fakeKind(), b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		var v *Verdict
		var err error
		start := time.Now()
		within(t, 5*time.Second, "Validate", func() { v, err = w.Validate(ctx, oneFile) })
		cancel()
		if err != nil || v.Status != StatusFailed || v.Completed || !strings.Contains(v.Diagnostics[0].Message, "sandbox") {
			t.Fatalf("call %d while the spare hangs: %+v, %v; want a failed status", i, v, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("call %d took %s with a 200 ms context", i, d)
		}
	}
	if n := b.starts.Load(); n != 1 {
		t.Errorf("%d sandboxes started, want the one spare (a hung start is waited for, not doubled)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var cerr error
	within(t, 5*time.Second, "Close", func() { cerr = w.Close(ctx) })
	if cerr == nil {
		t.Errorf("Close with the spare still starting: nil error, want one saying so")
	}
	close(b.release) // the start ends at last
	deadline := time.Now().Add(5 * time.Second)
	for b.closes.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the spare that started after Close gave up was not closed (%d closes)", b.closes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := w.Validate(context.Background(), oneFile); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after Close: %v, want ErrClosed", err)
	}
}

// TestCloseWaitsForACallBoundedByItsContext: Close while a call runs on a
// wedged sandbox returns when its context ends; the spare started beside
// the call is ended once the call is, and none is started after it.
func TestCloseWaitsForACallBoundedByItsContext(t *testing.T) {
	b := &fakeBackend{execBlock: make(chan struct{})}
	w, err := NewWorker(fakeKind(), b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{})
	go func() {
		defer close(called)
		_, _ = w.Validate(context.Background(), oneFile)
	}()
	for w.callStarted().IsZero() {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var cerr error
	within(t, 5*time.Second, "Close during a wedged call", func() { cerr = w.Close(ctx) })
	if !errors.Is(cerr, context.DeadlineExceeded) {
		t.Errorf("Close during a wedged call: %v, want its context's error", cerr)
	}
	close(b.execBlock)
	<-called
	time.Sleep(50 * time.Millisecond)
	// The call's sandbox and the spare started beside it: both ended,
	// none started after Close.
	if n, c := b.starts.Load(), b.closes.Load(); n != 2 || c != 2 {
		t.Errorf("%d sandboxes started, %d closed: want the call's and its spare, both closed once the worker closed", n, c)
	}
}

// TestCleanupFailurePoisons: a sandbox whose Close fails poisons the
// worker: the verdict says so, the next call is refused, the spare
// started beside the call is ended and no other started, the owner record keeps it across a restart, and a worker made
// on that record refuses work from the start.
func TestCleanupFailurePoisons(t *testing.T) {
	state := t.TempDir()
	owner, err := OpenOwner(state, "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{closeErr: errors.New("umount /workspace: device or resource busy")}
	w, err := NewWorker(fakeKind(), b, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.Validate(context.Background(), oneFile)
	if err != nil || !strings.HasPrefix(v.Cleanup, "failed: ") || !strings.Contains(v.Cleanup, "device or resource busy") {
		t.Fatalf("a call whose clean-up fails: %+v, %v", v, err)
	}
	if p := w.Poisoned(); !strings.Contains(p, "busy") {
		t.Errorf("Poisoned() = %q after a failed clean-up", p)
	}
	if _, err := w.Validate(context.Background(), oneFile); !errors.Is(err, ErrPoisoned) || !IsRefusal(err) {
		t.Errorf("the next call: %v, want ErrPoisoned", err)
	}
	if n, c := b.starts.Load(), b.closes.Load(); n != 2 || c != 2 {
		t.Errorf("%d sandboxes started, %d closed: want the call's and its spare, both closed once the worker was poisoned", n, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Errorf("Close of a poisoned worker: %v", err)
	}
	owner.Close()

	// A restart: the owner directory remembers.
	owner, err = OpenOwner(state, "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if !strings.Contains(owner.Poisoned(), "busy") {
		t.Errorf("after a restart the owner record says %q", owner.Poisoned())
	}
	b2 := &fakeBackend{}
	w2, err := NewWorker(fakeKind(), b2, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Validate(context.Background(), oneFile); !errors.Is(err, ErrPoisoned) {
		t.Errorf("a restarted worker: %v, want ErrPoisoned", err)
	}
	if n := b2.starts.Load(); n != 0 {
		t.Errorf("a poisoned worker started %d sandboxes", n)
	}
}

// TestCleanupLeftoverPoisons: a Close that reports success but leaves the
// sandbox's home in the owner directory (what the direct backend does
// when it cannot remove it) poisons the worker all the same.
func TestCleanupLeftoverPoisons(t *testing.T) {
	owner, err := OpenOwner(t.TempDir(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if _, err := owner.Recover(); err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{home: owner.TmpDir(), leaveHome: true}
	w, err := NewWorker(fakeKind(), b, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.Validate(context.Background(), oneFile)
	if err != nil || !strings.HasPrefix(v.Cleanup, "failed: ") || !strings.Contains(v.Cleanup, "home-") {
		t.Fatalf("a clean-up that left the sandbox's home: %+v, %v", v, err)
	}
	if _, err := w.Validate(context.Background(), oneFile); !errors.Is(err, ErrPoisoned) {
		t.Errorf("the next call: %v, want ErrPoisoned", err)
	}
	// A clean one is clean: the check is of what is left, not always.
	owner2, err := OpenOwner(t.TempDir(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	defer owner2.Close()
	if _, err := owner2.Recover(); err != nil {
		t.Fatal(err)
	}
	w2, err := NewWorker(fakeKind(), &fakeBackend{home: owner2.TmpDir()}, owner2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if v, err := w2.Validate(context.Background(), oneFile); err != nil || v.Cleanup != "clean" {
			t.Errorf("call %d with a clean clean-up: %+v, %v", i, v, err)
		}
	}
	if err := w2.WaitSpare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Clean(owner2.TmpDir())); len(ents) != 2 {
		t.Errorf("%d entries in the owner directory, want the next spare's home and its lock", len(ents))
	}
}

// TestHealthyStuckCall: the watchdog's health check. A call that has not
// settled long past its deadline (a wedged sandbox) makes the worker
// unhealthy and poisons it, since its clean-up is uncertain; a call
// within its bound does not.
func TestHealthyStuckCall(t *testing.T) {
	owner, err := OpenOwner(t.TempDir(), "fake", false)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	b := &fakeBackend{execBlock: make(chan struct{})}
	k := fakeKind()
	k.Deadline = 100 * time.Millisecond
	w, err := NewWorker(k, b, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.settle = 200 * time.Millisecond
	if !w.Healthy() {
		t.Fatal("an idle worker is unhealthy")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.Validate(context.Background(), oneFile)
	}()
	for w.callStarted().IsZero() {
		time.Sleep(5 * time.Millisecond)
	}
	if !w.Healthy() {
		t.Error("a call within its deadline made the worker unhealthy")
	}
	time.Sleep(400 * time.Millisecond)
	if w.Healthy() {
		t.Error("a call 400 ms past its start (deadline 100 ms, settle 200 ms) left the worker healthy")
	}
	if !strings.Contains(owner.Poisoned(), "settled") {
		t.Errorf("a stuck call did not poison the owner record: %q", owner.Poisoned())
	}
	close(b.execBlock)
	<-done
	if !w.Healthy() {
		t.Error("unhealthy once the call settled (poisoned, but not wedged)")
	}
	if _, err := w.Validate(context.Background(), oneFile); !errors.Is(err, ErrPoisoned) {
		t.Errorf("after a stuck call: %v, want ErrPoisoned", err)
	}
}
