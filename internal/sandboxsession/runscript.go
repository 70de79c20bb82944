package sandboxsession

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
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
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return ScriptResult{}, nil, err
	}
	defer done()
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
	seen := map[string]bool{}
	for _, p := range req.SeedPaths {
		if err := CheckPath(p); err != nil {
			return ScriptResult{}, fmt.Errorf("%w: seed_paths: %v", ErrInvalidArgs, err)
		}
		if seen[p] {
			return ScriptResult{}, fmt.Errorf("%w: seed_paths: %q given twice", ErrInvalidArgs, p)
		}
		seen[p] = true
	}
	child, err := s.m.startChild(ctx)
	if err != nil {
		return ScriptResult{}, err
	}
	s.m.mu.Lock()
	s.m.byBox[child.ID()] = s // its egress is this session's audit
	s.m.mu.Unlock()
	defer func() {
		s.m.mu.Lock()
		delete(s.m.byBox, child.ID())
		s.m.mu.Unlock()
		s.m.endChild(ctx, child)
	}()
	// The child's seed keeps its contents on disk, for its diff.
	store, err := newBlobStore(s.m.lim.StoreDir, s.m.lim.Quota)
	if err != nil {
		return ScriptResult{}, err
	}
	defer store.close()
	cs := &Session{m: s.m, id: s.id + "-child", box: child, baseline: map[string]*Entry{}, store: store, log: s.log,
		ctx: s.ctx, cancel: s.cancel, parent: s}
	// The parent's paths stream from its tar straight into the child's:
	// hard links stay links, nothing is held in memory on the host, and
	// at most a workspace's worth passes.
	if len(req.SeedPaths) > 0 {
		seed, err := cs.copyFrom(ctx, s, req.SeedPaths)
		if err != nil {
			return ScriptResult{}, err
		}
		for _, p := range req.SeedPaths {
			if seed.entries[p] == nil {
				return ScriptResult{}, fmt.Errorf("%w: seed_paths: %q is not in the workspace", ErrInvalidArgs, p)
			}
		}
		for p, e := range seed.entries {
			// What the extraction made: an entry the parent's snapshot
			// opened up for the copy arrives opened up.
			if e.inTar {
				e.Mode = e.tarMode
			}
			cs.baseline[p] = e
		}
	}
	if len(dec) > 0 {
		if err := cs.tarIn(ctx, bytes.NewReader(tarOf(dec))); err != nil {
			return ScriptResult{}, fmt.Errorf("seed the isolated child: %w", err)
		}
		for _, f := range dec {
			off, err := store.putBytes(f.data)
			if err != nil {
				return ScriptResult{}, fmt.Errorf("seed the isolated child: %w", err)
			}
			addBaseline(cs.baseline, f.path, &Entry{Type: "file", Mode: f.mode, Size: int64(len(f.data)), Sum: sumOf(f.data), off: off})
		}
	}
	if e := cs.baseline[req.Entry]; e == nil {
		return ScriptResult{}, fmt.Errorf("%w: entry %q is not in the child's seed (seed_paths or files)", ErrInvalidArgs, req.Entry)
	}
	s.note(Event{Kind: "child", Call: "sandbox_run_script", Detail: fmt.Sprintf("isolated child sandbox %s, %d seed files", child.ID(), countFiles(cs.baseline))})
	r, err := cs.execLocked(ctx, "sandbox_run_script", ExecRequest{Argv: interpreter(req.Entry, req.Args), Stdin: req.Stdin, Timeout: req.Timeout})
	res := ScriptResult{ExecResult: r, Isolated: true}
	if err == nil && (req.Diff == "json" || req.Diff == "unified") {
		o := snapOpts{}
		if req.Diff == "unified" {
			o.keep, o.keepMax = wantLines(cs.baseline), maxKept
		}
		snap, derr := cs.snap(ctx, o)
		if derr != nil {
			err = derr
		} else {
			d, derr := diffOf(ctx, diffIn{base: cs.baseline, baseData: cs.baseData, now: snap, unified: req.Diff == "unified"})
			if derr != nil {
				err = derr
			}
			res.ChildDiff = &d
		}
	}
	s.note(Event{Kind: "child", Call: "sandbox_run_script", Detail: "isolated child sandbox " + child.ID() + " discarded"})
	return res, err
}

// copyFrom copies paths of parent's workspace into s's (a child's):
// parent's snapshot stream is teed into s's tar, and indexed (contents in
// s.store) on the way.
func (s *Session) copyFrom(ctx context.Context, parent *Session, paths []string) (*snapshot, error) {
	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := s.tarIn(ctx, pr)
		pr.CloseWithError(err) // a failed extraction stops the copy
		extracted <- err
	}()
	snap, err := parent.snap(ctx, snapOpts{paths: paths, tee: pw, store: s.store, maxBytes: s.m.lim.Quota})
	pw.CloseWithError(err)
	xerr := <-extracted
	switch {
	case errors.Is(err, errTooBig) || errors.Is(err, errStoreFull):
		return nil, fmt.Errorf("%w: seed_paths: more than the child's workspace holds (%d bytes)", ErrInvalidArgs, s.m.lim.Quota)
	case err != nil:
		return nil, fmt.Errorf("copy seed_paths into the isolated child: %w", err)
	case xerr != nil:
		return nil, fmt.Errorf("seed the isolated child: %w", xerr)
	}
	return snap, nil
}

// startChild starts an isolated child, which takes a slot among the
// Manager's live sandboxes (the spare's, when there is one).
func (m *Manager) startChild(ctx context.Context) (Box, error) {
	m.mu.Lock()
	sp := m.spare
	if n := m.liveLocked(); n >= m.lim.MaxSessions && sp == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: no room for an isolated child: %d of %d sandboxes run (sessions and isolated children); close one, or run it in the shared workspace", ErrTooMany, n, m.lim.MaxSessions)
	}
	m.spare = nil
	m.children++
	m.mu.Unlock()
	box, err := m.startBox(ctx, sp)
	if err != nil {
		m.mu.Lock()
		m.children--
		m.mu.Unlock()
		m.refillSpare()
		return nil, fmt.Errorf("start the isolated child sandbox: %w", err)
	}
	return box, nil
}

// endChild closes an isolated child and frees its slot.
func (m *Manager) endChild(ctx context.Context, box Box) {
	m.closeBox(ctx, box)
	m.mu.Lock()
	m.children--
	m.mu.Unlock()
	m.refillSpare()
}

func countFiles(m map[string]*Entry) int {
	n := 0
	for _, e := range m {
		if e.Type == "file" {
			n++
		}
	}
	return n
}
