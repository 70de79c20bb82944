package sandboxsession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBackend starts fake boxes; while hold is set, Start waits for a
// release (or its context) first.
type fakeBackend struct {
	mu      sync.Mutex
	hold    chan struct{} // nil: start at once
	started atomic.Int32
	closed  atomic.Int32
	live    atomic.Int32
}

func (f *fakeBackend) Mode() string { return "fake" }

func (f *fakeBackend) Start(ctx context.Context, quota int64) (Box, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	n := f.started.Add(1)
	f.live.Add(1)
	return &fakeBox{id: fmt.Sprintf("fake-%d", n), f: f}, nil
}

type fakeBox struct {
	id   string
	f    *fakeBackend
	once sync.Once
}

func (b *fakeBox) ID() string { return b.id }

// Exec blocks until its context ends: a command that never returns.
func (b *fakeBox) Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error) {
	<-ctx.Done()
	return ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
}

func (b *fakeBox) Close(ctx context.Context) error {
	b.once.Do(func() { b.f.closed.Add(1); b.f.live.Add(-1) })
	return nil
}

// TestSpareNoDeadlock is the scenario: --max-sandboxes 3, one live
// session and the spare still starting; two concurrent creates both need
// a sandbox. Before, both waited for the one spare, the loser forever,
// past its deadline, and Close then hung.
func TestSpareNoDeadlock(t *testing.T) {
	f := &fakeBackend{}
	m := NewManager(f, Limits{MaxSessions: 3, StoreDir: t.TempDir()}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := m.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The spare the first create asked for is started; hold the next ones.
	waitFor(t, func() bool { return f.started.Load() == 2 })
	f.mu.Lock()
	f.hold = make(chan struct{})
	f.mu.Unlock()
	// Make the spare look as if it were still starting: claim it and put
	// a slow one in its place.
	sp := m.claimSpare()
	m.discard(sp)
	m.refillSpare()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			defer ccancel()
			_, _, errs[i] = m.Create(cctx, nil)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a create blocked past its 2 s deadline")
	}
	t.Logf("creates while the spare starts: %v", errs)
	closed := make(chan struct{})
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer ccancel()
		m.Close(cctx)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a spare that never starts")
	}
	close(f.hold) // the held starts finish now; what they made is closed
	waitFor(t, func() bool { return f.live.Load() == 0 })
}

// TestSlots: isolated children and the spare count against MaxSessions.
func TestSlots(t *testing.T) {
	f := &fakeBackend{}
	m := NewManager(f, Limits{MaxSessions: 2, StoreDir: t.TempDir()}, nil, nil)
	defer m.Close(context.Background())
	ctx := context.Background()
	if _, _, err := m.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	child, err := m.startChild(ctx) // takes the spare's slot
	if err != nil {
		t.Fatalf("the first child: %v", err)
	}
	if _, err := m.startChild(ctx); !errors.Is(err, ErrTooMany) {
		t.Errorf("a child past the limit (1 session, 1 child of 2): %v", err)
	}
	if _, _, err := m.Create(ctx, nil); !errors.Is(err, ErrTooMany) {
		t.Errorf("a session past the limit (1 session, 1 child of 2): %v", err)
	}
	if n := f.live.Load(); n > 2 {
		t.Errorf("%d sandboxes live, limit 2", n)
	}
	m.endChild(ctx, child)
	if _, _, err := m.Create(ctx, nil); err != nil {
		t.Errorf("a session after the child ended: %v", err)
	}
}

// TestCloseCancelsCall: sandbox_close and the server's stop end a call in
// progress instead of waiting for it (before, Close waited for the lock
// that a 5-minute exec, or an hour-long diff, held).
func TestCloseCancelsCall(t *testing.T) {
	f := &fakeBackend{}
	m := NewManager(f, Limits{MaxSessions: 4, StoreDir: t.TempDir()}, nil, nil)
	ctx := context.Background()
	for _, how := range []string{"sandbox_close", "server stop"} {
		s, _, err := m.Create(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, _, err := s.Exec(ctx, ExecRequest{Command: "sleep 1000"})
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		t0 := time.Now()
		if how == "sandbox_close" {
			if _, err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			m.Close(ctx)
		}
		select {
		case err := <-got:
			if !errors.Is(err, ErrEnded) {
				t.Errorf("%s: the call ended with %v, want ErrEnded", how, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the call went on", how)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("%s took %s", how, d)
		}
	}
	waitFor(t, func() bool { return f.live.Load() == 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("condition not met in 5 s")
}
