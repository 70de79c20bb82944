package testkit

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []time.Duration
		want Sample
	}{
		{"none", nil, Sample{}},
		{"one", []time.Duration{ms(3)}, Sample{N: 1, Median: ms(3), P95: ms(3), Max: ms(3)}},
		{"unsorted", []time.Duration{ms(5), ms(1), ms(3)}, Sample{N: 3, Median: ms(3), P95: ms(5), Max: ms(5)}},
		// 20 runs: the 19th is the 95th percentile.
		{"twenty", func() []time.Duration {
			var d []time.Duration
			for i := 20; i >= 1; i-- {
				d = append(d, ms(float64(i)))
			}
			return d
		}(), Sample{N: 20, Median: ms(11), P95: ms(19), Max: ms(20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.runs, 0); got != tc.want {
				t.Errorf("summarize: %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	base := HostLoad{
		True:   Sample{N: 50, Median: ms(1), P95: ms(2), Max: ms(3)},
		Python: Sample{N: 50, Median: ms(50), P95: ms(60), Max: ms(70)},
		PS:     Sample{N: 50, Median: ms(30), P95: ms(40), Max: ms(50)},
	}
	for _, tc := range []struct {
		name string
		load func(l *HostLoad)
		want []string // substrings of the error; none: no error
	}{
		{"same", func(*HostLoad) {}, nil},
		{"within", func(l *HostLoad) { l.True.P95, l.Python.Median, l.PS.Max = ms(50), ms(99), ms(1900) }, nil},
		{"ps stalls", func(l *HostLoad) { l.PS.Max = 27 * time.Second }, []string{"ps -e took up to 27s"}},
		{"python slow", func(l *HostLoad) { l.Python.Median = ms(120) }, []string{"python3 -c pass: median 120ms"}},
		{"true slow", func(l *HostLoad) { l.True.P95 = ms(60) }, []string{"true: p95 60ms"}},
		{"timed out", func(l *HostLoad) { l.PS.TimedOut = 1 }, []string{"ps -e: 1 of 50 runs timed out"}},
		{"nothing measured", func(l *HostLoad) { l.PS = Sample{} }, []string{"ps -e: no run measured"}},
		{"every bound", func(l *HostLoad) { l.True.P95, l.Python.Median, l.PS.Max = time.Second, time.Second, 9*time.Second },
			[]string{"true:", "python3", "ps -e took"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := base
			tc.load(&l)
			err := l.Check(base, DefaultBounds())
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Check: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check: nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// TestMeasureHost runs the probe for a moment on this host: every command
// measured, nothing timed out, and a timeout shows as one.
func TestMeasureHost(t *testing.T) {
	ctx := context.Background()
	l, err := MeasureHost(ctx, ProbeOptions{Duration: 500 * time.Millisecond})
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("SKIP: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle host: %s", l)
	for name, s := range map[string]Sample{"true": l.True, "python3": l.Python, "ps": l.PS} {
		if s.N == 0 || s.TimedOut > 0 || s.Median <= 0 || s.Max < s.P95 || s.P95 < s.Median {
			t.Errorf("%s: %s", name, s)
		}
	}
	d, late, err := timeRun(ctx, 50*time.Millisecond, []string{"sleep", "5"})
	if err != nil || !late || d != 50*time.Millisecond {
		t.Errorf("sleep 5 with a 50 ms timeout: %s, timed out %v, %v", d, late, err)
	}
	if _, _, err := timeRun(ctx, time.Second, []string{"false"}); err == nil {
		t.Error("false: no error")
	}
}
