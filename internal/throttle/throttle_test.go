package throttle

import (
	"sync"
	"testing"
	"time"
)

// TestAllow: a burst of perSecond passes, the rest is held back and
// reported once, with its number, by the next event let through.
func TestAllow(t *testing.T) {
	tests := []struct {
		name       string
		perSecond  int
		events     int // within a millisecond
		wantPassed int
	}{
		{"under the rate", 200, 150, 150},
		{"at the rate", 200, 200, 200},
		{"a flood", 200, 250, 200},
		{"zero is one", 0, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := New(tt.perSecond)
			t0 := time.Unix(1000, 0)
			passed := 0
			for i := range tt.events {
				ok, held := th.Allow(t0.Add(time.Duration(i) * time.Microsecond))
				if ok {
					passed++
				}
				if held != 0 {
					t.Fatalf("event %d: a report of %d while still flooding the first second", i, held)
				}
			}
			if passed != tt.wantPassed {
				t.Errorf("%d of %d passed, want %d", passed, tt.events, tt.wantPassed)
			}
			wantHeld := tt.events - tt.wantPassed
			ok, held := th.Allow(t0.Add(2 * time.Second))
			if !ok || held != wantHeld {
				t.Errorf("next second: ok %v, held %d, want true, %d", ok, held, wantHeld)
			}
			// Reported once: nothing the second time, nor at Flush.
			if _, held := th.Allow(t0.Add(3 * time.Second)); held != 0 {
				t.Errorf("reported again: %d", held)
			}
			if n := th.Flush(); n != 0 {
				t.Errorf("Flush after the report: %d", n)
			}
		})
	}
}

// TestReportAtMostOncePerSecond: in a long flood the held count comes once
// a second, and every held event is in exactly one report.
func TestReportAtMostOncePerSecond(t *testing.T) {
	th := New(100)
	t0 := time.Unix(1000, 0)
	const events = 30000 // 10000/s for 3 s
	passed, held, reports := 0, 0, 0
	for i := range events {
		ok, h := th.Allow(t0.Add(time.Duration(i) * 100 * time.Microsecond))
		if ok {
			passed++
		}
		if h > 0 {
			reports++
			held += h
		}
	}
	held += th.Flush()
	if reports > 3 {
		t.Errorf("%d reports in 3 s, want at most 3", reports)
	}
	if passed+held != events {
		t.Errorf("passed %d + held %d != %d events", passed, held, events)
	}
	if passed > 100+3*100+1 {
		t.Errorf("%d passed in 3 s at 100/s", passed)
	}
}

// TestFlush: what no event came to report is handed out by Flush, once.
func TestFlush(t *testing.T) {
	th := New(1)
	now := time.Unix(1000, 0)
	th.Allow(now)
	for range 5 {
		if ok, _ := th.Allow(now); ok {
			t.Fatal("a second event passed a rate of 1")
		}
	}
	if n := th.Flush(); n != 5 {
		t.Errorf("Flush = %d, want 5", n)
	}
	if n := th.Flush(); n != 0 {
		t.Errorf("second Flush = %d, want 0", n)
	}
}

func TestConcurrent(t *testing.T) {
	th := New(50)
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := th.Allow(now); ok {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if held := th.Flush(); passed != 50 || held != 750 {
		t.Errorf("passed %d, held %d; want 50, 750", passed, held)
	}
}
