// Package sessionmcp is the MCP adapter of package sandboxsession: the ten
// sandbox_* tools of `sodactl sandbox mcp`, with input and output schemas.
// Every result carries structuredContent (a Result) and a concise text
// rendering that holds everything a text-only client needs. An execution
// that fails (a command exiting non-zero, a time-out, a refused call, an
// unknown or closed id) is an in-band isError result; arguments that do
// not match the schema, or are not what the tool accepts (a hostile
// path), are a JSON-RPC invalid-params error.
package sessionmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// Result is every tool's structured result.
type Result struct {
	Tool      string `json:"tool"`
	SandboxID string `json:"sandbox_id,omitempty"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	// ExpiresAt is when the sandbox ends unless a call comes.
	ExpiresAt string `json:"expires_at,omitempty"`
	// Exec is a command's or script's run (sandbox_exec, sandbox_run_script).
	Exec *sandboxsession.ExecResult `json:"exec,omitempty"`
	// Isolated and ChildDiff are an isolated run's.
	Isolated  bool                 `json:"isolated,omitempty"`
	ChildDiff *sandboxsession.Diff `json:"child_diff,omitempty"`
	// Files are sandbox_read_files'.
	Files []sandboxsession.FileContent `json:"files,omitempty"`
	// Diff is sandbox_diff's; DiffSummary every change-making call's
	// short form is not computed (sandbox_diff is one tar of the
	// workspace).
	Diff *sandboxsession.Diff `json:"diff,omitempty"`
	// Events are the audit events of this call.
	Events []sandboxsession.Event `json:"events"`
	// Audit is sandbox_audit's.
	Audit *AuditPage `json:"audit,omitempty"`
	// Limits are the server's (sandbox_create).
	Limits *Limits `json:"limits,omitempty"`
}

// AuditPage is a read of a session's audit log.
type AuditPage struct {
	Records    []sandboxsession.Event `json:"records"`
	NextCursor uint64                 `json:"next_cursor"`
	// Dropped says that records before the cursor were dropped (the log
	// keeps the latest ones).
	Dropped bool `json:"dropped,omitempty"`
	// JournalMatch selects the session's records in the journal
	// (journalctl SODA_SANDBOX=ID); JournalCursor is the journal's
	// cursor of its latest one, where journald has it.
	JournalMatch  string `json:"journal_match"`
	JournalCursor string `json:"journal_cursor,omitempty"`
}

// Limits are the server's fixed limits.
type Limits struct {
	MaxSandboxes       int    `json:"max_sandboxes"`
	QuotaBytes         int64  `json:"quota_bytes"`
	IdleExpirySeconds  int64  `json:"idle_expiry_seconds"`
	ExecTimeoutSeconds int64  `json:"exec_timeout_seconds"`
	MaxOutputBytes     int    `json:"max_output_bytes"`
	Backend            string `json:"backend"`
}

// Inputs.
type (
	createIn struct {
		Files []sandboxsession.File `json:"files,omitempty" jsonschema:"inline files to seed the baseline with (never a host path)"`
	}
	idIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
	}
	filesIn struct {
		SandboxID string                `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Files     []sandboxsession.File `json:"files" jsonschema:"inline files (UTF-8 text or base64)"`
	}
	readIn struct {
		SandboxID string   `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Paths     []string `json:"paths" jsonschema:"workspace-relative paths to read"`
		Encoding  string   `json:"encoding,omitempty" jsonschema:"utf-8 (default: text as text, binary as base64) or base64 (everything)"`
	}
	execIn struct {
		SandboxID      string   `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Command        string   `json:"command,omitempty" jsonschema:"a shell command, run with sh -c in the workspace"`
		Argv           []string `json:"argv,omitempty" jsonschema:"a command and its arguments, run as they are (instead of command)"`
		Cwd            string   `json:"cwd,omitempty" jsonschema:"working directory relative to the workspace"`
		Stdin          string   `json:"stdin,omitempty" jsonschema:"text given on the command's standard input"`
		TimeoutSeconds float64  `json:"timeout_seconds,omitempty" jsonschema:"time-out in seconds (at most the server's; default the server's)"`
	}
	scriptIn struct {
		SandboxID      string                `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Entry          string                `json:"entry" jsonschema:"the script's workspace-relative path (.sh, .bash, .py, .js, .mjs, .cjs pick the interpreter; else run as it is)"`
		Args           []string              `json:"args,omitempty" jsonschema:"arguments to the script"`
		Stdin          string                `json:"stdin,omitempty" jsonschema:"text given on the script's standard input"`
		Isolated       bool                  `json:"isolated,omitempty" jsonschema:"run in a disposable child sandbox whose changes are discarded"`
		SeedPaths      []string              `json:"seed_paths,omitempty" jsonschema:"isolated: workspace paths copied into the child"`
		Files          []sandboxsession.File `json:"files,omitempty" jsonschema:"isolated: inline files for the child"`
		Diff           string                `json:"diff,omitempty" jsonschema:"isolated: none (default), json or unified: the child's changes"`
		TimeoutSeconds float64               `json:"timeout_seconds,omitempty" jsonschema:"time-out in seconds (at most the server's)"`
	}
	diffIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Format    string `json:"format,omitempty" jsonschema:"json (default) or unified"`
	}
	auditIn struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the id sandbox_create returned"`
		Cursor    uint64 `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous read (0: from the oldest kept)"`
		Max       int    `json:"max,omitempty" jsonschema:"records at most (1 to 1000; default 1000)"`
	}
)

// sessions is what the tools use of a *sandboxsession.Manager: the seam through
// which the unit tests give them a fake (managerSessions is the real one).
type sessions interface {
	Limits() sandboxsession.Limits
	Create(ctx context.Context, files []sandboxsession.File) (sandboxSession, []sandboxsession.Event, error)
	Get(id string) (sandboxSession, error)
}

// sandboxSession is what the tools use of a *sandboxsession.Session.
type sandboxSession interface {
	ID() string
	BoxID() string
	Expires() time.Time
	Seed(ctx context.Context, files []sandboxsession.File) ([]sandboxsession.Event, error)
	WriteFiles(ctx context.Context, files []sandboxsession.File) ([]sandboxsession.Event, error)
	ReadFiles(ctx context.Context, paths []string, encoding string) ([]sandboxsession.FileContent, []sandboxsession.Event, error)
	Exec(ctx context.Context, req sandboxsession.ExecRequest) (sandboxsession.ExecResult, []sandboxsession.Event, error)
	RunScript(ctx context.Context, req sandboxsession.ScriptRequest) (sandboxsession.ScriptResult, []sandboxsession.Event, error)
	Diff(ctx context.Context, unified bool) (sandboxsession.Diff, []sandboxsession.Event, error)
	Reset(ctx context.Context) ([]sandboxsession.Event, error)
	Audit(cursor uint64, n int) ([]sandboxsession.Event, uint64, bool)
	Close(ctx context.Context) ([]sandboxsession.Event, error)
}

// managerSessions is a *sandboxsession.Manager as sessions.
type managerSessions struct{ m *sandboxsession.Manager }

func (a managerSessions) Limits() sandboxsession.Limits { return a.m.Limits() }

func (a managerSessions) Create(ctx context.Context, files []sandboxsession.File) (sandboxSession, []sandboxsession.Event, error) {
	sess, evs, err := a.m.Create(ctx, files)
	if err != nil {
		return nil, evs, err // not a typed nil
	}
	return sess, evs, nil
}

func (a managerSessions) Get(id string) (sandboxSession, error) {
	sess, err := a.m.Get(id)
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// NewServer returns the MCP server of m's sessions.
func NewServer(m *sandboxsession.Manager, backend, version string) *mcp.Server {
	return newServer(managerSessions{m}, backend, version, journalCursor)
}

// newServer is NewServer on any sessions; cursor finds the journal's
// cursor of a sandbox's latest record (journalCursor).
func newServer(m sessions, backend, version string, cursor func(ctx context.Context, box string) string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "soda-sandbox", Title: "soda persistent sandboxes", Version: version},
		&mcp.ServerOptions{Instructions: "Persistent OS sandboxes: sandbox_create (optionally seeded), then sandbox_exec / sandbox_run_script as often as needed, sandbox_read_files / sandbox_write_files, sandbox_diff against the seeded baseline, sandbox_reset, sandbox_close. Paths are relative to the workspace (/workspace in the sandbox)."})
	lim := m.Limits()
	limits := &Limits{MaxSandboxes: lim.MaxSessions, QuotaBytes: lim.Quota, IdleExpirySeconds: int64(lim.IdleExpiry / time.Second),
		ExecTimeoutSeconds: int64(lim.ExecTimeout / time.Second), MaxOutputBytes: lim.MaxOutput, Backend: backend}
	get := func(r *Result, id string) (sandboxSession, error) {
		r.SandboxID = id
		return m.Get(id)
	}
	addTool(s, "sandbox_create", "Create a persistent sandbox (a real OS sandbox with a private workspace) and return its id. Optional inline files seed its baseline.",
		func(ctx context.Context, in createIn, r *Result) error {
			r.Limits = limits
			sess, evs, err := m.Create(ctx, in.Files)
			if err != nil {
				return err
			}
			r.SandboxID, r.Events = sess.ID(), evs
			r.ExpiresAt = sess.Expires().UTC().Format(time.RFC3339)
			return nil
		})
	addTool(s, "sandbox_seed", "Add inline files (UTF-8 or base64) to the sandbox's baseline. Refused once anything has run or been written.",
		func(ctx context.Context, in filesIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			r.Events, err = sess.Seed(ctx, in.Files)
			r.ExpiresAt = expires(sess)
			return err
		})
	addTool(s, "sandbox_write_files", "Write inline files into the workspace (the baseline is unchanged). All or nothing.",
		func(ctx context.Context, in filesIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			r.Events, err = sess.WriteFiles(ctx, in.Files)
			r.ExpiresAt = expires(sess)
			return err
		})
	addTool(s, "sandbox_read_files", "Read files of the workspace, as text or base64, without changing them.",
		func(ctx context.Context, in readIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			r.Files, r.Events, err = sess.ReadFiles(ctx, in.Paths, in.Encoding)
			r.ExpiresAt = expires(sess)
			return err
		})
	addTool(s, "sandbox_exec", "Run a command in the live sandbox, in the shared workspace: exit code, stdout and stderr (each capped, marked when cut).",
		func(ctx context.Context, in execIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			res, evs, err := sess.Exec(ctx, sandboxsession.ExecRequest{Command: in.Command, Argv: in.Argv, Dir: in.Cwd, Stdin: in.Stdin, Timeout: seconds(in.TimeoutSeconds)})
			r.Events, r.ExpiresAt = evs, expires(sess)
			if err != nil {
				return err
			}
			r.Exec = &res
			return execFailure(res)
		})
	addTool(s, "sandbox_run_script", "Run a script of the workspace, or of a disposable isolated child copy (seeded from workspace paths or inline files, changes discarded, optionally diffed).",
		func(ctx context.Context, in scriptIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			res, evs, err := sess.RunScript(ctx, sandboxsession.ScriptRequest{Entry: in.Entry, Args: in.Args, Stdin: in.Stdin, Isolated: in.Isolated,
				SeedPaths: in.SeedPaths, Files: in.Files, Diff: in.Diff, Timeout: seconds(in.TimeoutSeconds)})
			r.Events, r.ExpiresAt = evs, expires(sess)
			if err != nil {
				return err
			}
			r.Exec, r.Isolated, r.ChildDiff = &res.ExecResult, res.Isolated, res.ChildDiff
			return execFailure(res.ExecResult)
		})
	addTool(s, "sandbox_diff", "The workspace's changes against the original seeded baseline (json, or unified): added, modified, deleted, mode and symlink changes; binary files marked.",
		func(ctx context.Context, in diffIn, r *Result) error {
			if in.Format != "" && in.Format != "json" && in.Format != "unified" {
				return fmt.Errorf("%w: format %q: json or unified", sandboxsession.ErrInvalidArgs, in.Format)
			}
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			d, evs, err := sess.Diff(ctx, in.Format == "unified")
			r.Events, r.ExpiresAt = evs, expires(sess)
			if err == nil {
				r.Diff = &d
			}
			return err
		})
	addTool(s, "sandbox_reset", "Put the workspace back to its seeded baseline (the audit is kept).",
		func(ctx context.Context, in idIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			r.Events, err = sess.Reset(ctx)
			r.ExpiresAt = expires(sess)
			return err
		})
	addTool(s, "sandbox_audit", "Read the sandbox's audit log (what it ran and was refused) with a cursor; also in the journal (SODA_SANDBOX).",
		func(ctx context.Context, in auditIn, r *Result) error {
			if in.Max < 0 || in.Max > 1000 {
				return fmt.Errorf("%w: max %d: 1 to 1000", sandboxsession.ErrInvalidArgs, in.Max)
			}
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			recs, next, dropped := sess.Audit(in.Cursor, in.Max)
			r.Events = []sandboxsession.Event{}
			r.ExpiresAt = expires(sess)
			r.Audit = &AuditPage{Records: recs, NextCursor: next, Dropped: dropped, JournalMatch: "SODA_SANDBOX=" + sess.BoxID(),
				JournalCursor: cursor(ctx, sess.BoxID())}
			return nil
		})
	addTool(s, "sandbox_close", "End the sandbox and everything in it; its id is never reopened.",
		func(ctx context.Context, in idIn, r *Result) error {
			sess, err := get(r, in.SandboxID)
			if err != nil {
				return err
			}
			r.Events, err = sess.Close(ctx)
			return err
		})
	return s
}

func expires(s sandboxSession) string { return s.Expires().UTC().Format(time.RFC3339) }

func seconds(f float64) time.Duration {
	if f <= 0 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// errExecFailed marks a command that ran and failed: an isError result
// whose structured content has the whole run.
var errExecFailed = errors.New("the command failed")

func execFailure(r sandboxsession.ExecResult) error {
	switch {
	case r.TimedOut:
		return fmt.Errorf("%w: killed at its time-out", errExecFailed)
	case r.ExitCode != 0:
		return fmt.Errorf("%w: exit status %d", errExecFailed, r.ExitCode)
	}
	return nil
}

// journalCursor is the journal's cursor of the latest record of box, or
// "" without journald.
func journalCursor(ctx context.Context, box string) string {
	if box == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "journalctl", "--no-pager", "-q", "-n", "1", "-o", "json", "SODA_SANDBOX="+box).Output()
	if err != nil {
		return ""
	}
	var rec struct {
		Cursor string `json:"__CURSOR"`
	}
	if json.Unmarshal(bytes.TrimSpace(out), &rec) != nil {
		return ""
	}
	return rec.Cursor
}

// addTool registers a tool whose arguments are checked against In's
// schema (a mismatch is a JSON-RPC invalid-params error) and whose
// handler fills a Result; a handler error is an isError result, except
// sandboxsession.ErrInvalidArgs, which is invalid params too.
func addTool[In any](s *mcp.Server, name, desc string, h func(context.Context, In, *Result) error) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", name, err))
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", name, err))
	}
	out, err := jsonschema.For[Result](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", name, err))
	}
	s.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: in, OutputSchema: out},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			raw := req.Params.Arguments
			if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
				raw = json.RawMessage("{}")
			}
			var generic any
			if err := json.Unmarshal(raw, &generic); err != nil {
				return nil, invalid(name, err)
			}
			if err := resolved.Validate(generic); err != nil {
				return nil, invalid(name, err)
			}
			var args In
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&args); err != nil {
				return nil, invalid(name, err)
			}
			r := &Result{Tool: name, Events: []sandboxsession.Event{}}
			herr := h(ctx, args, r)
			if errors.Is(herr, sandboxsession.ErrInvalidArgs) {
				return nil, invalid(name, herr)
			}
			if r.Events == nil {
				r.Events = []sandboxsession.Event{}
			}
			r.OK = herr == nil
			if herr != nil {
				r.Error = herr.Error()
			}
			data, err := json.Marshal(r)
			if err != nil {
				return nil, fmt.Errorf("%s: marshal the result: %w", name, err)
			}
			return &mcp.CallToolResult{IsError: herr != nil, StructuredContent: json.RawMessage(data),
				Content: []mcp.Content{&mcp.TextContent{Text: render(r)}}}, nil
		})
}

func invalid(tool string, err error) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("%s: invalid arguments: %v", tool, strings.TrimPrefix(err.Error(), sandboxsession.ErrInvalidArgs.Error()+": "))}
}
