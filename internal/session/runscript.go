package session

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"
)

// ScriptRequest is a script to run (RunScript).
type ScriptRequest struct {
	// Entry is the script's path in the workspace (the child's, when
	// Isolated); its interpreter follows from its extension (.sh sh, .bash
	// bash, .py python3, .js/.mjs/.cjs node), else it is run as it is.
	Entry string
	Args  []string
	Stdin string
	// Isolated runs it in a disposable child sandbox, seeded with
	// SeedPaths copied from this workspace and Files, whose changes are
	// discarded; Diff (none, json, unified) reports them.
	Isolated  bool
	SeedPaths []string
	Files     []File
	Diff      string
	Timeout   time.Duration
}

// ScriptResult is a script's run.
type ScriptResult struct {
	ExecResult
	Isolated bool `json:"isolated"`
	// ChildDiff is the child's changes against its seed (Diff json or
	// unified).
	ChildDiff *Diff `json:"child_diff,omitempty"`
}

// interpreter returns the argv that runs entry.
func interpreter(entry string, args []string) []string {
	p := path.Join(Workspace, entry)
	var argv []string
	switch path.Ext(entry) {
	case ".sh":
		argv = []string{"sh", p}
	case ".bash":
		argv = []string{"bash", p}
	case ".py":
		argv = []string{"python3", p}
	case ".js", ".mjs", ".cjs":
		argv = []string{"node", p}
	default:
		argv = []string{p}
	}
	return append(argv, args...)
}

// RunScript runs a script in the shared workspace or, Isolated, in a
// child sandbox of its own.
func (s *Session) RunScript(ctx context.Context, req ScriptRequest) (ScriptResult, []Event, error) {
	if err := s.begin(); err != nil {
		return ScriptResult{}, nil, err
	}
	res, err := s.runScriptLocked(ctx, req)
	return res, s.end(), err
}

func (s *Session) runScriptLocked(ctx context.Context, req ScriptRequest) (ScriptResult, error) {
	if err := CheckPath(req.Entry); err != nil {
		return ScriptResult{}, fmt.Errorf("%w: entry: %v", ErrInvalidArgs, err)
	}
	switch req.Diff {
	case "", "none", "json", "unified":
	default:
		return ScriptResult{}, fmt.Errorf("%w: diff %q: none, json or unified", ErrInvalidArgs, req.Diff)
	}
	if !req.Isolated {
		if len(req.SeedPaths)+len(req.Files) > 0 || (req.Diff != "" && req.Diff != "none") {
			return ScriptResult{}, fmt.Errorf("%w: seed_paths, files and diff are for an isolated run (isolated: true); sandbox_diff shows the shared workspace's changes", ErrInvalidArgs)
		}
		r, err := s.execLocked(ctx, "sandbox_run_script", ExecRequest{Argv: interpreter(req.Entry, req.Args), Stdin: req.Stdin, Timeout: req.Timeout})
		return ScriptResult{ExecResult: r}, err
	}
	dec, err := decodeFiles(req.Files, maxFilesPerCall, s.m.lim.Quota)
	if err != nil {
		return ScriptResult{}, fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	for _, p := range req.SeedPaths {
		if err := CheckPath(p); err != nil {
			return ScriptResult{}, fmt.Errorf("%w: seed_paths: %v", ErrInvalidArgs, err)
		}
	}
	// The child's seed: the parent's paths (copied out of the parent's
	// sandbox), then the inline files over them.
	seed := map[string]Entry{}
	if len(req.SeedPaths) > 0 {
		snap, err := s.tarOut(ctx, req.SeedPaths...)
		if err != nil {
			return ScriptResult{}, err
		}
		for _, p := range req.SeedPaths {
			if _, ok := snap[p]; !ok {
				return ScriptResult{}, fmt.Errorf("%w: seed_paths: %q is not in the workspace", ErrInvalidArgs, p)
			}
		}
		for p, e := range snap {
			if e.Type == "file" {
				addBaseline(seed, decoded{path: p, data: e.Data, mode: e.Mode})
			}
		}
	}
	for _, f := range dec {
		addBaseline(seed, f)
	}
	if _, ok := seed[req.Entry]; !ok {
		return ScriptResult{}, fmt.Errorf("%w: entry %q is not in the child's seed (seed_paths or files)", ErrInvalidArgs, req.Entry)
	}
	child, err := s.m.backend.Start(ctx, s.m.lim.Quota)
	if err != nil {
		return ScriptResult{}, fmt.Errorf("start the isolated child sandbox: %w", err)
	}
	s.note(Event{Kind: "child", Call: "sandbox_run_script", Detail: fmt.Sprintf("isolated child sandbox %s, %d seed files", child.ID(), countFiles(seed))})
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		_ = child.Close(cctx)
		cancel()
	}()
	// The child runs through the same code as the session, on its own box.
	cs := &Session{m: s.m, id: s.id + "-child", box: child, baseline: map[string]Entry{}, audit: s.audit, log: s.log, call: s.call}
	var files []decoded
	for p, e := range seed {
		if e.Type == "file" {
			files = append(files, decoded{path: p, data: e.Data, mode: e.Mode})
		}
	}
	if err := cs.tarIn(ctx, tarOf(files)); err != nil {
		s.call = cs.call
		return ScriptResult{}, fmt.Errorf("seed the isolated child: %w", err)
	}
	cs.baseline = seed
	r, err := cs.execLocked(ctx, "sandbox_run_script", ExecRequest{Argv: interpreter(req.Entry, req.Args), Stdin: req.Stdin, Timeout: req.Timeout})
	res := ScriptResult{ExecResult: r, Isolated: true}
	if err == nil && (req.Diff == "json" || req.Diff == "unified") {
		snap, derr := cs.tarOut(ctx, ".")
		if derr != nil {
			err = derr
		} else {
			d := diff(seed, snap, req.Diff == "unified", maxUnified)
			res.ChildDiff = &d
		}
	}
	s.call = cs.call
	s.note(Event{Kind: "child", Call: "sandbox_run_script", Detail: "isolated child sandbox " + child.ID() + " discarded"})
	return res, err
}

func countFiles(m map[string]Entry) int {
	n := 0
	for _, e := range m {
		if e.Type == "file" {
			n++
		}
	}
	return n
}

// describe renders argv for a text result.
func describe(argv []string) string { return strings.Join(argv, " ") }
