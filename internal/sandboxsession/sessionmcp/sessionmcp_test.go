package sessionmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// fakeSessions is a sessions of one scripted fakeSession: the tools' own
// logic, with no sandbox behind them.
type fakeSessions struct {
	sess      *fakeSession
	createErr error
	createEvs []sandboxsession.Event

	mu      sync.Mutex
	gets    int                   // calls of Get
	created []sandboxsession.File // the files of the last Create
}

func (f *fakeSessions) Limits() sandboxsession.Limits {
	return sandboxsession.Limits{MaxSessions: 3, Quota: 1 << 20, IdleExpiry: 2 * time.Hour, ExecTimeout: 90 * time.Second, MaxOutput: 4096}
}

func (f *fakeSessions) Create(ctx context.Context, files []sandboxsession.File) (sandboxSession, []sandboxsession.Event, error) {
	f.mu.Lock()
	f.created = files
	f.mu.Unlock()
	if f.createErr != nil {
		return nil, f.createEvs, f.createErr
	}
	return f.sess, f.createEvs, nil
}

func (f *fakeSessions) Get(id string) (sandboxSession, error) {
	f.mu.Lock()
	f.gets++
	f.mu.Unlock()
	if f.sess == nil || id != f.sess.id {
		return nil, fmt.Errorf("sandbox %q: %w (sandbox_create makes one)", id, sandboxsession.ErrUnknown)
	}
	return f.sess, nil
}

func (f *fakeSessions) getCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

// fakeSession answers every call with its fields: err is each call's
// error, evs its events. A call records what it was asked in asked.
type fakeSession struct {
	id, box string
	expires time.Time
	err     error
	evs     []sandboxsession.Event
	exec    sandboxsession.ExecResult
	script  sandboxsession.ScriptResult
	files   []sandboxsession.FileContent
	diff    sandboxsession.Diff
	audit   []sandboxsession.Event
	next    uint64
	dropped bool
	// block makes Exec wait for its context's end, telling cancelled.
	block     bool
	cancelled chan error

	mu    sync.Mutex
	asked []any
}

func (s *fakeSession) ask(a any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, a)
}

func (s *fakeSession) lastAsked() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.asked) == 0 {
		return nil
	}
	return s.asked[len(s.asked)-1]
}

func (s *fakeSession) ID() string         { return s.id }
func (s *fakeSession) BoxID() string      { return s.box }
func (s *fakeSession) Expires() time.Time { return s.expires }

func (s *fakeSession) Seed(ctx context.Context, files []sandboxsession.File) ([]sandboxsession.Event, error) {
	s.ask(seedCall(files))
	return s.evs, s.err
}

func (s *fakeSession) WriteFiles(ctx context.Context, files []sandboxsession.File) ([]sandboxsession.Event, error) {
	s.ask(writeCall(files))
	return s.evs, s.err
}

func (s *fakeSession) ReadFiles(ctx context.Context, paths []string, encoding string) ([]sandboxsession.FileContent, []sandboxsession.Event, error) {
	s.ask(readCall{paths, encoding})
	return s.files, s.evs, s.err
}

func (s *fakeSession) Exec(ctx context.Context, req sandboxsession.ExecRequest) (sandboxsession.ExecResult, []sandboxsession.Event, error) {
	s.ask(req)
	if s.block {
		<-ctx.Done()
		s.cancelled <- ctx.Err()
		return sandboxsession.ExecResult{}, s.evs, fmt.Errorf("%w: %w", sandboxsession.ErrEnded, ctx.Err())
	}
	return s.exec, s.evs, s.err
}

func (s *fakeSession) RunScript(ctx context.Context, req sandboxsession.ScriptRequest) (sandboxsession.ScriptResult, []sandboxsession.Event, error) {
	s.ask(req)
	return s.script, s.evs, s.err
}

func (s *fakeSession) Diff(ctx context.Context, unified bool) (sandboxsession.Diff, []sandboxsession.Event, error) {
	s.ask(diffCall(unified))
	return s.diff, s.evs, s.err
}

func (s *fakeSession) Reset(ctx context.Context) ([]sandboxsession.Event, error) {
	s.ask("reset")
	return s.evs, s.err
}

func (s *fakeSession) Audit(cursor uint64, n int) ([]sandboxsession.Event, uint64, bool) {
	s.ask(auditCall{cursor, n})
	return s.audit, s.next, s.dropped
}

func (s *fakeSession) Close(ctx context.Context) ([]sandboxsession.Event, error) {
	s.ask("close")
	return s.evs, s.err
}

// What a fakeSession was asked.
type (
	seedCall  []sandboxsession.File
	writeCall []sandboxsession.File
	readCall  struct {
		paths    []string
		encoding string
	}
	diffCall  bool
	auditCall struct {
		cursor uint64
		max    int
	}
)

// connect serves the tools of fs and returns a client's session of them.
func connect(t *testing.T, fs *fakeSessions) *mcp.ClientSession {
	t.Helper()
	cursor := func(ctx context.Context, box string) string { return "cursor-of-" + box }
	server := newServer(fs, "fake", "test", cursor)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "test"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls tool with args (JSON) and returns the result, its
// structured content and its text; err is a JSON-RPC error.
func call(ctx context.Context, cs *mcp.ClientSession, tool, args string) (*mcp.CallToolResult, *Result, string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
	if err != nil {
		return nil, nil, "", err
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, nil, "", fmt.Errorf("marshal the structured content: %w", err)
	}
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, "", fmt.Errorf("structured content %s: %w", raw, err)
	}
	if len(res.Content) != 1 {
		return nil, nil, "", fmt.Errorf("%d contents, want 1 text", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return nil, nil, "", fmt.Errorf("content %T, want text", res.Content[0])
	}
	return res, &r, text.Text, nil
}

// TestTools lists the ten tools, each with an input and output schema.
func TestTools(t *testing.T) {
	cs := connect(t, &fakeSessions{})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("%s: input schema %v, output schema %v, description %q", tool.Name, tool.InputSchema, tool.OutputSchema, tool.Description)
		}
	}
	slices.Sort(names)
	want := []string{"sandbox_audit", "sandbox_close", "sandbox_create", "sandbox_diff", "sandbox_exec", "sandbox_read_files",
		"sandbox_reset", "sandbox_run_script", "sandbox_seed", "sandbox_write_files"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
}

// TestInvalidArguments: arguments the schema or the tool refuses are a
// JSON-RPC invalid-params error naming the tool and what is wrong, and
// the backend is not asked (but for its own ErrInvalidArgs, which maps
// to the same error, without the sentinel's words).
func TestInvalidArguments(t *testing.T) {
	tests := []struct {
		name, tool, args string
		backendErr       error
		want             []string // in the error's message
		wantGets         int
	}{
		{"missing id", "sandbox_exec", `{"command":"true"}`, nil, []string{"sandbox_exec: invalid arguments", "sandbox_id"}, 0},
		{"unknown field", "sandbox_reset", `{"sandbox_id":"s1","bogus":1}`, nil, []string{"sandbox_reset: invalid arguments", "bogus"}, 0},
		{"wrong type", "sandbox_exec", `{"sandbox_id":"s1","timeout_seconds":"ten"}`, nil, []string{"sandbox_exec: invalid arguments", "timeout_seconds"}, 0},
		{"paths not a list", "sandbox_read_files", `{"sandbox_id":"s1","paths":"a.txt"}`, nil, []string{"sandbox_read_files: invalid arguments", "paths"}, 0},
		{"files missing", "sandbox_write_files", `{"sandbox_id":"s1"}`, nil, []string{"sandbox_write_files: invalid arguments", "files"}, 0},
		{"entry missing", "sandbox_run_script", `{"sandbox_id":"s1"}`, nil, []string{"sandbox_run_script: invalid arguments", "entry"}, 0},
		{"diff format", "sandbox_diff", `{"sandbox_id":"s1","format":"xml"}`, nil, []string{`sandbox_diff: invalid arguments: format "xml": json or unified`}, 0},
		{"audit max high", "sandbox_audit", `{"sandbox_id":"s1","max":1001}`, nil, []string{"sandbox_audit: invalid arguments: max 1001: 1 to 1000"}, 0},
		{"audit max negative", "sandbox_audit", `{"sandbox_id":"s1","max":-1}`, nil, []string{"sandbox_audit: invalid arguments: max -1: 1 to 1000"}, 0},
		{"backend refuses a path", "sandbox_exec", `{"sandbox_id":"s1","command":"true","cwd":"../etc"}`,
			fmt.Errorf("%w: cwd %q: a \"..\" segment", sandboxsession.ErrInvalidArgs, "../etc"), []string{`sandbox_exec: invalid arguments: cwd "../etc": a ".." segment`}, 1},
		{"backend refuses a file", "sandbox_seed", `{"sandbox_id":"s1","files":[{"path":"/abs","content":""}]}`,
			fmt.Errorf("%w: path %q is absolute", sandboxsession.ErrInvalidArgs, "/abs"), []string{`sandbox_seed: invalid arguments: path "/abs" is absolute`}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &fakeSessions{sess: &fakeSession{id: "s1", err: tt.backendErr}}
			cs := connect(t, fs)
			res, _, _, err := call(t.Context(), cs, tt.tool, tt.args)
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) {
				t.Fatalf("result %+v, error %v: want a JSON-RPC error", res, err)
			}
			if rpc.Code != jsonrpc.CodeInvalidParams {
				t.Errorf("code %d, want %d (invalid params)", rpc.Code, jsonrpc.CodeInvalidParams)
			}
			for _, w := range tt.want {
				if !strings.Contains(rpc.Message, w) {
					t.Errorf("message %q, want it to say %q", rpc.Message, w)
				}
			}
			if strings.Count(rpc.Message, sandboxsession.ErrInvalidArgs.Error()) != 1 {
				t.Errorf("message %q repeats the sentinel", rpc.Message)
			}
			if got := fs.getCount(); got != tt.wantGets {
				t.Errorf("the backend was asked %d times, want %d", got, tt.wantGets)
			}
		})
	}
}

// TestResults: what the backend returns (results, events, errors) maps
// to the structured result, the isError flag and the text.
func TestResults(t *testing.T) {
	code0, code3 := 0, 3
	expires := time.Date(2026, 12, 3, 20, 0, 0, 0, time.FixedZone("CET", 3600))
	const wantExpires = "2026-12-03T19:00:00Z"
	execEv := []sandboxsession.Event{{Seq: 7, Kind: "exit", Argv: []string{"sh", "-c", "make"}, Code: &code3}}
	tests := []struct {
		name, tool, args string
		sess             fakeSession // id s1, box box-1 and expires are set
		createErr        error
		wantErr          string // Result.Error; "" ok
		wantText         []string
		wantAsked        any // the backend's last question (nil: none checked)
		check            func(t *testing.T, r *Result)
	}{
		{
			name: "create", tool: "sandbox_create", args: `{"files":[{"path":"a.txt","content":"hi"}]}`,
			wantText: []string{"sandbox_create s1: ok", "expires: " + wantExpires, "limits: 3 sandboxes, workspace 1048576 bytes, idle expiry 7200s, 90s per execution (fake)", "audit #1 create"},
			check: func(t *testing.T, r *Result) {
				want := Limits{MaxSandboxes: 3, QuotaBytes: 1 << 20, IdleExpirySeconds: 7200, ExecTimeoutSeconds: 90, MaxOutputBytes: 4096, Backend: "fake"}
				if r.SandboxID != "s1" || r.ExpiresAt != wantExpires || r.Limits == nil || *r.Limits != want || len(r.Events) != 1 {
					t.Errorf("result %+v, limits %+v", r, r.Limits)
				}
			},
		},
		{
			name: "create refused", tool: "sandbox_create", args: `{}`, createErr: sandboxsession.ErrTooMany,
			wantErr:  "too many live sandboxes",
			wantText: []string{"sandbox_create: FAILED: too many live sandboxes", "limits: 3 sandboxes"},
			check: func(t *testing.T, r *Result) {
				if r.SandboxID != "" || r.ExpiresAt != "" || r.Events == nil {
					t.Errorf("result %+v: want no id, no expiry, events []", r)
				}
			},
		},
		{
			name: "unknown id", tool: "sandbox_reset", args: `{"sandbox_id":"nope"}`,
			wantErr:  `sandbox "nope": no such sandbox (sandbox_create makes one)`,
			wantText: []string{`sandbox_reset nope: FAILED: sandbox "nope": no such sandbox`},
			check: func(t *testing.T, r *Result) {
				if r.SandboxID != "nope" || r.ExpiresAt != "" {
					t.Errorf("result %+v: want the id asked, no expiry", r)
				}
			},
		},
		{
			name: "seed", tool: "sandbox_seed", args: `{"sandbox_id":"s1","files":[{"path":"b.sh","content":"aGk=","encoding":"base64","mode":493}]}`,
			sess:      fakeSession{evs: []sandboxsession.Event{{Seq: 2, Kind: "seed", Detail: "b.sh"}}},
			wantText:  []string{"sandbox_seed s1: ok", "expires: " + wantExpires, "audit #2 seed: b.sh"},
			wantAsked: seedCall{{Path: "b.sh", Content: "aGk=", Encoding: "base64", Mode: 493}},
		},
		{
			name: "seed phase over", tool: "sandbox_seed", args: `{"sandbox_id":"s1","files":[]}`,
			sess:     fakeSession{err: fmt.Errorf("sandbox s1: %w", sandboxsession.ErrSeedPhase), evs: []sandboxsession.Event{{Seq: 4, Kind: "refused", Detail: "seed"}}},
			wantErr:  "sandbox s1: the seed phase is over",
			wantText: []string{"sandbox_seed s1: FAILED: sandbox s1: the seed phase is over", "expires: " + wantExpires, "audit #4 refused: seed"},
		},
		{
			name: "write", tool: "sandbox_write_files", args: `{"sandbox_id":"s1","files":[{"path":"c.txt","content":"x"}]}`,
			wantText:  []string{"sandbox_write_files s1: ok"},
			wantAsked: writeCall{{Path: "c.txt", Content: "x"}},
		},
		{
			name: "write fails", tool: "sandbox_write_files", args: `{"sandbox_id":"s1","files":[{"path":"c.txt","content":"x"}]}`,
			sess:     fakeSession{err: errors.New("write c.txt: the workspace is full")},
			wantErr:  "write c.txt: the workspace is full",
			wantText: []string{"sandbox_write_files s1: FAILED: write c.txt: the workspace is full"},
		},
		{
			name: "read", tool: "sandbox_read_files", args: `{"sandbox_id":"s1","paths":["a.txt","gone","l","d"],"encoding":"base64"}`,
			sess: fakeSession{files: []sandboxsession.FileContent{
				{Path: "a.txt", Exists: true, Type: "file", Encoding: "base64", Content: "aGk=", Size: 2, Mode: "0644"},
				{Path: "gone"},
				{Path: "l", Exists: true, Type: "symlink", Target: "a.txt"},
				{Path: "d", Exists: true, Type: "dir"},
			}},
			wantText:  []string{"--- a.txt (2 bytes, mode 0644, base64) ---\naGk=\n", "--- gone: no such file ---", "--- l: symlink to a.txt ---", "--- d: dir ---"},
			wantAsked: readCall{[]string{"a.txt", "gone", "l", "d"}, "base64"},
			check: func(t *testing.T, r *Result) {
				if len(r.Files) != 4 || r.Files[0].Content != "aGk=" || r.Files[1].Exists {
					t.Errorf("files %+v", r.Files)
				}
			},
		},
		{
			name: "exec ok", tool: "sandbox_exec", args: `{"sandbox_id":"s1","command":"make","cwd":"src","stdin":"in","timeout_seconds":1.5}`,
			sess:      fakeSession{exec: sandboxsession.ExecResult{Stdout: "built\n"}, evs: []sandboxsession.Event{{Seq: 3, Kind: "exit", Argv: []string{"sh", "-c", "make"}, Code: &code0}}},
			wantText:  []string{"sandbox_exec s1: ok", "exit code: 0\n--- stdout ---\nbuilt\n", "audit #3 exit sh -c make exit 0"},
			wantAsked: sandboxsession.ExecRequest{Command: "make", Dir: "src", Stdin: "in", Timeout: 1500 * time.Millisecond},
			check: func(t *testing.T, r *Result) {
				if r.Exec == nil || r.Exec.Stdout != "built\n" || r.Exec.ExitCode != 0 {
					t.Errorf("exec %+v", r.Exec)
				}
			},
		},
		{
			name: "exec argv, no time-out", tool: "sandbox_exec", args: `{"sandbox_id":"s1","argv":["ls","-l"],"timeout_seconds":-4}`,
			wantText:  []string{"sandbox_exec s1: ok", "exit code: 0"},
			wantAsked: sandboxsession.ExecRequest{Argv: []string{"ls", "-l"}},
		},
		{
			name: "exec exits non-zero", tool: "sandbox_exec", args: `{"sandbox_id":"s1","command":"make"}`,
			sess:     fakeSession{exec: sandboxsession.ExecResult{ExitCode: 3, Stderr: "no rule", StderrTruncated: true, MemoryLimitHit: true}, evs: execEv},
			wantErr:  "the command failed: exit status 3",
			wantText: []string{"sandbox_exec s1: FAILED: the command failed: exit status 3", "exit code: 3 (memory limit hit)\n", "--- stderr (truncated) ---\nno rule\n", "audit #7 exit sh -c make exit 3"},
			check: func(t *testing.T, r *Result) {
				if r.Exec == nil || r.Exec.ExitCode != 3 || !r.Exec.StderrTruncated || len(r.Events) != 1 || r.ExpiresAt != wantExpires {
					t.Errorf("result %+v, exec %+v: want the whole run", r, r.Exec)
				}
			},
		},
		{
			name: "exec times out", tool: "sandbox_exec", args: `{"sandbox_id":"s1","command":"sleep 9"}`,
			sess:     fakeSession{exec: sandboxsession.ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true, Stdout: "/w==", StdoutEncoding: "base64"}},
			wantErr:  "the command failed: killed at its time-out",
			wantText: []string{"exit code: -1 (SIGKILL) (timed out)\n", "--- stdout (base64) ---\n/w==\n"},
		},
		{
			name: "exec ended by close", tool: "sandbox_exec", args: `{"sandbox_id":"s1","command":"sleep 9"}`,
			sess:     fakeSession{err: sandboxsession.ErrEnded, evs: []sandboxsession.Event{{Seq: 9, Kind: "close"}}},
			wantErr:  "the sandbox ended during the call",
			wantText: []string{"sandbox_exec s1: FAILED: the sandbox ended during the call", "audit #9 close"},
			check: func(t *testing.T, r *Result) {
				if r.Exec != nil || len(r.Events) != 1 {
					t.Errorf("result %+v: want no run, the close event", r)
				}
			},
		},
		{
			name: "script isolated", tool: "sandbox_run_script",
			args: `{"sandbox_id":"s1","entry":"t.py","args":["-v"],"stdin":"x","isolated":true,"seed_paths":["src"],"files":[{"path":"f","content":"1"}],"diff":"json","timeout_seconds":2}`,
			sess: fakeSession{script: sandboxsession.ScriptResult{ExecResult: sandboxsession.ExecResult{Stdout: "ok"}, Isolated: true,
				ChildDiff: &sandboxsession.Diff{Summary: sandboxsession.DiffSummary{Added: 1}, Changes: []sandboxsession.Change{{Path: "out.bin", Kind: "added", Type: "file", Binary: true, Mode: "0644"}}}}},
			wantText: []string{"exit code: 0 (isolated child, discarded)\n--- stdout ---\nok\n", "diff: 1 added, 0 modified, 0 deleted, 0 mode, 0 type changes\nadded out.bin (file) binary mode  -> 0644\n"},
			wantAsked: sandboxsession.ScriptRequest{Entry: "t.py", Args: []string{"-v"}, Stdin: "x", Isolated: true, SeedPaths: []string{"src"},
				Files: []sandboxsession.File{{Path: "f", Content: "1"}}, Diff: "json", Timeout: 2 * time.Second},
			check: func(t *testing.T, r *Result) {
				if !r.Isolated || r.ChildDiff == nil || r.ChildDiff.Summary.Added != 1 || r.Exec == nil || r.Exec.Stdout != "ok" || r.Diff != nil {
					t.Errorf("result %+v", r)
				}
			},
		},
		{
			name: "script fails", tool: "sandbox_run_script", args: `{"sandbox_id":"s1","entry":"t.sh"}`,
			sess:     fakeSession{script: sandboxsession.ScriptResult{ExecResult: sandboxsession.ExecResult{ExitCode: 2, QuotaHit: true, TasksLimitHit: true}}},
			wantErr:  "the command failed: exit status 2",
			wantText: []string{"exit code: 2 (workspace full) (task limit hit)\n"},
		},
		{
			name: "script backend error", tool: "sandbox_run_script", args: `{"sandbox_id":"s1","entry":"t.sh","isolated":true}`,
			sess:     fakeSession{err: fmt.Errorf("start the child sandbox: %w", sandboxsession.ErrTooMany)},
			wantErr:  "start the child sandbox: too many live sandboxes",
			wantText: []string{"sandbox_run_script s1: FAILED: start the child sandbox: too many live sandboxes"},
			check: func(t *testing.T, r *Result) {
				if r.Exec != nil || r.Isolated {
					t.Errorf("result %+v: want no run", r)
				}
			},
		},
		{
			name: "diff unified", tool: "sandbox_diff", args: `{"sandbox_id":"s1","format":"unified"}`,
			sess:      fakeSession{diff: sandboxsession.Diff{Summary: sandboxsession.DiffSummary{Modified: 1}, Unified: "--- a/x\n+++ b/x\n", Truncated: true}},
			wantText:  []string{"diff: 0 added, 1 modified", "--- a/x\n+++ b/x\n(unified diff truncated)\n"},
			wantAsked: diffCall(true),
		},
		{
			name: "diff json", tool: "sandbox_diff", args: `{"sandbox_id":"s1"}`,
			sess:      fakeSession{diff: sandboxsession.Diff{Summary: sandboxsession.DiffSummary{Deleted: 1}, Changes: []sandboxsession.Change{{Path: "l", Kind: "deleted", Type: "symlink", OldTarget: "a"}}}},
			wantText:  []string{"deleted l (symlink) a -> \n"},
			wantAsked: diffCall(false),
			check: func(t *testing.T, r *Result) {
				if r.Diff == nil || len(r.Diff.Changes) != 1 {
					t.Errorf("diff %+v", r.Diff)
				}
			},
		},
		{
			name: "diff fails", tool: "sandbox_diff", args: `{"sandbox_id":"s1","format":"json"}`,
			sess:     fakeSession{err: errors.New("snapshot: more than the workspace can hold")},
			wantErr:  "snapshot: more than the workspace can hold",
			wantText: []string{"sandbox_diff s1: FAILED"},
			check: func(t *testing.T, r *Result) {
				if r.Diff != nil {
					t.Errorf("diff %+v on a failure", r.Diff)
				}
			},
		},
		{
			name: "reset", tool: "sandbox_reset", args: `{"sandbox_id":"s1"}`,
			sess:      fakeSession{evs: []sandboxsession.Event{{Seq: 5, Kind: "reset"}}},
			wantText:  []string{"sandbox_reset s1: ok", "audit #5 reset"},
			wantAsked: "reset",
		},
		{
			name: "audit", tool: "sandbox_audit", args: `{"sandbox_id":"s1","cursor":12,"max":2}`,
			sess: fakeSession{audit: []sandboxsession.Event{{Seq: 12, Kind: "egress", Target: "example.org:443", Decision: "denied"}, {Seq: 13, Kind: "expire", Detail: "idle"}},
				next: 14, dropped: true, evs: []sandboxsession.Event{{Seq: 99, Kind: "not this call's"}}},
			wantText:  []string{"audit #12 egress example.org:443 denied\naudit #13 expire: idle\nnext cursor: 14; journal: journalctl SODA_SANDBOX=box-1 --cursor 'cursor-of-box-1'\n"},
			wantAsked: auditCall{12, 2},
			check: func(t *testing.T, r *Result) {
				a := r.Audit
				if a == nil || len(a.Records) != 2 || a.NextCursor != 14 || !a.Dropped || a.JournalMatch != "SODA_SANDBOX=box-1" || a.JournalCursor != "cursor-of-box-1" {
					t.Errorf("audit %+v", a)
				}
				if len(r.Events) != 0 {
					t.Errorf("events %+v: an audit read is no event", r.Events)
				}
			},
		},
		{
			name: "close", tool: "sandbox_close", args: `{"sandbox_id":"s1"}`,
			sess:      fakeSession{evs: []sandboxsession.Event{{Seq: 6, Kind: "close"}}},
			wantText:  []string{"sandbox_close s1: ok\naudit #6 close\n"},
			wantAsked: "close",
			check: func(t *testing.T, r *Result) {
				if r.ExpiresAt != "" {
					t.Errorf("a closed sandbox expires at %s", r.ExpiresAt)
				}
			},
		},
		{
			name: "close fails", tool: "sandbox_close", args: `{"sandbox_id":"s1"}`,
			sess:     fakeSession{err: errors.New("end sandbox box-1: device busy")},
			wantErr:  "end sandbox box-1: device busy",
			wantText: []string{"sandbox_close s1: FAILED: end sandbox box-1: device busy"},
		},
	}
	for i := range tests {
		tt := &tests[i] // not a copy: a fakeSession holds a mutex
		t.Run(tt.name, func(t *testing.T) {
			sess := &tt.sess
			sess.id, sess.box, sess.expires = "s1", "box-1", expires
			fs := &fakeSessions{sess: sess, createErr: tt.createErr, createEvs: []sandboxsession.Event{{Seq: 1, Kind: "create"}}}
			res, r, text, err := call(t.Context(), connect(t, fs), tt.tool, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError != (tt.wantErr != "") || r.OK != (tt.wantErr == "") || r.Error != tt.wantErr {
				t.Errorf("isError %v, ok %v, error %q; want error %q", res.IsError, r.OK, r.Error, tt.wantErr)
			}
			if r.Tool != tt.tool || r.Events == nil {
				t.Errorf("tool %q, events %v: want %s, a list", r.Tool, r.Events, tt.tool)
			}
			if tt.wantErr == "" && tt.tool != "sandbox_close" && tt.tool != "sandbox_create" && r.ExpiresAt != wantExpires {
				t.Errorf("expires at %q, want %s", r.ExpiresAt, wantExpires)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text, w) {
					t.Errorf("text %q\nwant it to hold %q", text, w)
				}
			}
			if tt.wantAsked != nil {
				if got := sess.lastAsked(); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.wantAsked) {
					t.Errorf("the backend was asked %#v\nwant %#v", got, tt.wantAsked)
				}
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestCreateFiles: sandbox_create passes its inline files on as they are.
func TestCreateFiles(t *testing.T) {
	fs := &fakeSessions{sess: &fakeSession{id: "s1"}}
	_, r, _, err := call(t.Context(), connect(t, fs), "sandbox_create", `{"files":[{"path":"a/b.txt","content":"AA==","encoding":"base64","mode":384}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []sandboxsession.File{{Path: "a/b.txt", Content: "AA==", Encoding: "base64", Mode: 384}}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !r.OK || !slices.Equal(fs.created, want) {
		t.Errorf("ok %v, created with %+v, want %+v", r.OK, fs.created, want)
	}
}

// TestCancelledCall: a client that cancels its call cancels the
// backend's context: the command is stopped, not left to run.
func TestCancelledCall(t *testing.T) {
	sess := &fakeSession{id: "s1", block: true, cancelled: make(chan error, 1)}
	cs := connect(t, &fakeSessions{sess: sess})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, _, err := call(ctx, cs, "sandbox_exec", `{"sandbox_id":"s1","command":"sleep 600"}`)
		done <- err
	}()
	// Cancel once the backend runs the command.
	deadline := time.Now().Add(5 * time.Second)
	for sess.lastAsked() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the command never reached the backend")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled call returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	select {
	case err := <-sess.cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the backend's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's context was not cancelled: the command would run on")
	}
}
