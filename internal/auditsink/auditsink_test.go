package auditsink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/logevent"
	"github.com/soda-project/soda/internal/sandbox"
)

// capture is a slog.Handler that keeps what it is given.
type capture struct {
	mu      sync.Mutex
	entries []entry
}

type entry struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *capture) WithGroup(string) slog.Handler            { return c }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	e := entry{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { e.attrs[a.Key] = a.Value.String(); return true })
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.mu.Unlock()
	return nil
}

func (c *capture) find(msg string) []entry {
	var out []entry
	for _, e := range c.entries {
		if e.msg == msg {
			out = append(out, e)
		}
	}
	return out
}

func egressRecord(seq uint64, at time.Time, decision string) sandbox.Record {
	return sandbox.Record{Seq: seq, Time: at, Sandbox: "sbx-x", Event: "egress",
		Egress: &egress.Event{Kind: "connect", Target: fmt.Sprintf("flood%d.example:443", seq), Decision: decision}}
}

// TestLogEntries: each record's level, message, key event (its journal
// MESSAGE_ID) and fields, as sodactl has always logged them.
func TestLogEntries(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name    string
		rec     sandbox.Record
		logged  bool
		level   slog.Level
		msg     string
		event   logevent.Event
		attrs   map[string]string
		noEvent bool
	}{
		{name: "start", rec: sandbox.Record{Event: "start", Argv: []string{"claude", "fix it"}, Grants: []string{"a:443", "b:80"}, ReadWrite: []string{"/w", "/x"}},
			logged: true, level: slog.LevelInfo, msg: "sandbox start", event: logevent.SandboxStart,
			attrs: map[string]string{"argv": "claude fix it", "grants": "a:443,b:80", "rw": "/w:/x", "ro": ""}},
		{name: "layer applied", rec: sandbox.Record{Event: "layer", Layer: "seccomp", State: "applied"},
			logged: true, level: slog.LevelInfo, msg: "sandbox layer", event: logevent.SandboxLayer, attrs: map[string]string{"layer": "seccomp", "state": "applied"}},
		{name: "layer degraded", rec: sandbox.Record{Event: "layer", Layer: "cgroup", State: "degraded", Detail: "no controller"},
			logged: true, level: slog.LevelWarn, msg: "sandbox layer", event: logevent.SandboxLayer, attrs: map[string]string{"detail": "no controller"}},
		{name: "env", rec: sandbox.Record{Event: "env", Dropped: []sandbox.EnvDrop{{Key: "LD_PRELOAD"}, {Key: "BASH_ENV"}}},
			logged: true, level: slog.LevelInfo, msg: "sandbox layer", event: logevent.SandboxLayer, attrs: map[string]string{"layer": "env", "dropped": "LD_PRELOAD,BASH_ENV"}},
		{name: "egress allowed", rec: egressRecord(4, now, "allow"),
			logged: true, level: slog.LevelInfo, msg: "sandbox egress", event: logevent.SandboxEgress, attrs: map[string]string{"decision": "allow", "target": "flood4.example:443"}},
		{name: "egress denied", rec: egressRecord(5, now, "deny"),
			logged: true, level: slog.LevelWarn, msg: "sandbox egress", event: logevent.SandboxEgress, attrs: map[string]string{"decision": "deny"}},
		{name: "egress without event", rec: sandbox.Record{Event: "egress"}, logged: false},
		{name: "grant", rec: sandbox.Record{Event: "grant", Grants: []string{"c:443"}, By: "uid 0"},
			logged: true, level: slog.LevelInfo, msg: "sandbox egress grant", event: logevent.SandboxEgress, attrs: map[string]string{"grants": "c:443", "by": "uid 0"}},
		{name: "refused", rec: sandbox.Record{Event: "refused", Detail: "no landlock"},
			logged: true, level: slog.LevelError, msg: "sandbox refused", event: logevent.SandboxRefused, attrs: map[string]string{"detail": "no landlock"}},
		{name: "planted", rec: sandbox.Record{Event: "planted", Detail: "/w/.git/hooks/x"},
			logged: true, level: slog.LevelWarn, msg: "sandbox planted files the host may run (made during the run, where nothing protected them): check them before using them",
			noEvent: true, attrs: map[string]string{"paths": "/w/.git/hooks/x"}},
		{name: "exit", rec: sandbox.Record{Event: "exit", Exit: &sandbox.ExitStatus{Code: 3}, DurationMS: 12},
			logged: true, level: slog.LevelInfo, msg: "sandbox exit", event: logevent.SandboxExit, attrs: map[string]string{"code": "3", "timed_out": "false", "duration_ms": "12"}},
		{name: "exec", rec: sandbox.Record{Event: "exec", Argv: []string{"make", "test"}, Pid: 7},
			logged: true, level: slog.LevelInfo, msg: "sandbox exec", noEvent: true, attrs: map[string]string{"argv": "make test", "pid": "7"}},
		{name: "ready", rec: sandbox.Record{Event: "ready"}, logged: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c capture
			l := NewLog(slog.New(&c))
			tt.rec.Sandbox, tt.rec.Seq = "sbx-x", 9
			if tt.rec.Time.IsZero() {
				tt.rec.Time = now
			}
			l.Write(tt.rec)
			if !tt.logged {
				if len(c.entries) != 0 {
					t.Fatalf("logged %+v, want nothing", c.entries)
				}
				return
			}
			if len(c.entries) != 1 {
				t.Fatalf("%d entries, want 1: %+v", len(c.entries), c.entries)
			}
			e := c.entries[0]
			if e.level != tt.level || e.msg != tt.msg {
				t.Errorf("level %v msg %q, want %v %q", e.level, e.msg, tt.level, tt.msg)
			}
			if got := e.attrs[logevent.Key]; tt.noEvent && got != "" || !tt.noEvent && got != tt.event.Value.String() {
				t.Errorf("event %q, want %q", got, tt.event.Value.String())
			}
			if e.attrs["sandbox"] != "sbx-x" || e.attrs["seq"] == "" {
				t.Errorf("sandbox %q seq %q", e.attrs["sandbox"], e.attrs["seq"])
			}
			for k, v := range tt.attrs {
				if got, ok := e.attrs[k]; !ok || got != v {
					t.Errorf("%s = %q (present %v), want %q", k, got, ok, v)
				}
			}
		})
	}
}

// TestLogRateLimit: a flood of egress records logs LogRate of them a
// second; the rest are reported once, with their number, by the next one
// logged (or by Close when none comes), while the other records all go
// through.
func TestLogRateLimit(t *testing.T) {
	const flood = LogRate + 50
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name      string
		next      bool // an egress record a second later carries the report
		wantLines int  // egress entries logged
	}{
		{"reported by the next record", true, LogRate + 1},
		{"reported at Close", false, LogRate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c capture
			l := NewLog(slog.New(&c))
			seq := uint64(0)
			for i := range flood {
				seq++
				l.Write(egressRecord(seq, t0.Add(time.Duration(i)*time.Microsecond), "deny"))
			}
			seq++
			l.Write(sandbox.Record{Seq: seq, Time: t0, Sandbox: "sbx-x", Event: "refused"})
			if tt.next {
				seq++
				l.Write(egressRecord(seq, t0.Add(2*time.Second), "deny"))
			}
			l.Close()
			l.Close()
			if n := len(c.find("sandbox egress")); n != tt.wantLines {
				t.Errorf("%d egress entries, want %d", n, tt.wantLines)
			}
			if n := len(c.find("sandbox refused")); n != 1 {
				t.Errorf("the refusal was held back with the flood (%d entries)", n)
			}
			sup := c.find("sandbox egress suppressed")
			if len(sup) != 1 {
				t.Fatalf("%d summaries, want 1: %+v", len(sup), sup)
			}
			if sup[0].attrs["suppressed"] != "50" || sup[0].attrs["sandbox"] != "sbx-x" || sup[0].level != slog.LevelWarn {
				t.Errorf("summary %+v, want a warning that 50 were suppressed in sbx-x", sup[0])
			}
		})
	}
}

func TestJSONCap(t *testing.T) {
	var sb strings.Builder
	j := NewJSON(&sb, 2048)
	var seq uint64
	rec := func(event string) {
		seq++
		r := sandbox.Record{Seq: seq, Sandbox: "sbx-x", Event: event}
		if event == "egress" {
			r = egressRecord(seq, time.Time{}, "deny")
		}
		j.Write(r)
	}
	rec("start")
	for range 1000 {
		rec("egress")
	}
	rec("exit")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	var last sandbox.Record
	kept := 0
	for _, l := range lines {
		var r sandbox.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Event == "egress" {
			kept++
		}
		last = r
	}
	if len(sb.String()) > 2048+1024 {
		t.Errorf("wrote %d bytes past a cap of 2048", len(sb.String()))
	}
	if kept == 0 || kept >= 1000 {
		t.Errorf("%d egress records kept, want some, not all", kept)
	}
	if !strings.Contains(sb.String(), `"event":"exit"`) {
		t.Error("the exit record was left out past the cap")
	}
	want := fmt.Sprintf("%d egress records (seq %d to 1001) left out", 1000-kept, kept+2)
	if last.Event != "dropped" || last.Sandbox != "sbx-x" || !strings.Contains(last.Detail, want) {
		t.Errorf("last record %+v, want a summary %q", last, want)
	}
}

// TestJSONUnderCap: nothing left out, no "dropped" record; a cap of 0 is
// the default.
func TestJSONUnderCap(t *testing.T) {
	tests := []struct {
		max  int64
		want int64
	}{{0, DefaultJSONMax}, {-1, DefaultJSONMax}, {4096, 4096}}
	for _, tt := range tests {
		var sb strings.Builder
		j := NewJSON(&sb, tt.max)
		if j.max != tt.want {
			t.Errorf("NewJSON(max %d): cap %d, want %d", tt.max, j.max, tt.want)
		}
		j.Write(egressRecord(1, time.Time{}, "allow"))
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(sb.String(), "\n"); n != 1 || strings.Contains(sb.String(), `"dropped"`) {
			t.Errorf("max %d: %q, want the one record", tt.max, sb.String())
		}
	}
}

// TestOpen: every sink named gets every record; the JSON file is refused
// inside a grant; with no sink, records are discarded.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		journal bool
		path    string
		wantErr string
	}{
		{"journal and file", true, filepath.Join(dir, "a.jsonl"), ""},
		{"file only", false, filepath.Join(dir, "b.jsonl"), ""},
		{"journal only", true, "", ""},
		{"nothing", false, "", ""},
		{"file inside a grant", true, filepath.Join(ws, "a.jsonl"), "inside the granted directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c capture
			o := Options{JSONPath: tt.path, Grants: []string{ws}}
			if tt.journal {
				o.Journal = slog.New(&c)
			}
			s, err := Open(o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s.Write(sandbox.Record{Seq: 1, Sandbox: "sbx-x", Event: "start"})
			s.Write(sandbox.Record{Seq: 2, Sandbox: "sbx-x", Event: "exit", Exit: &sandbox.ExitStatus{}})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 2}[tt.journal]; len(c.entries) != want {
				t.Errorf("%d journal entries, want %d", len(c.entries), want)
			}
			if tt.path != "" {
				b, err := os.ReadFile(tt.path)
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(b), "\n"); n != 2 {
					t.Errorf("%d JSON lines, want 2: %s", n, b)
				}
			}
		})
	}
}
