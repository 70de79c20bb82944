package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits bound a Manager's sessions; they are set when it starts and no
// call can raise them.
type Limits struct {
	// MaxSessions is how many sessions may be live at once (8).
	MaxSessions int
	// Quota is each workspace's size in bytes (512 MiB).
	Quota int64
	// IdleExpiry ends a session no call used for that long (4 h).
	IdleExpiry time.Duration
	// ExecTimeout bounds each execution (5 min); a call may ask for less.
	ExecTimeout time.Duration
	// MaxOutput is how much of a command's stdout and of its stderr a
	// result holds (1 MiB each); the rest is cut and the cut marked.
	MaxOutput int
	// MaxAudit is how many audit events a session keeps (10000).
	MaxAudit int
}

// DefaultLimits are the and the seed's defaults.
var DefaultLimits = Limits{MaxSessions: 8, Quota: 512 << 20, IdleExpiry: 4 * time.Hour, ExecTimeout: 5 * time.Minute,
	MaxOutput: 1 << 20, MaxAudit: 10000}

// Per-call bounds that follow from the limits.
const (
	maxFilesPerCall = 10000
	maxEntries      = 200000
	maxUnified      = 4 << 20
)

func (l *Limits) fill() {
	d := DefaultLimits
	if l.MaxSessions <= 0 {
		l.MaxSessions = d.MaxSessions
	}
	if l.Quota <= 0 {
		l.Quota = d.Quota
	}
	if l.IdleExpiry <= 0 {
		l.IdleExpiry = d.IdleExpiry
	}
	if l.ExecTimeout <= 0 {
		l.ExecTimeout = d.ExecTimeout
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = d.MaxOutput
	}
	if l.MaxAudit <= 0 {
		l.MaxAudit = d.MaxAudit
	}
}

// Errors a caller can tell apart.
var (
	ErrUnknown     = errors.New("no such sandbox")
	ErrTooMany     = errors.New("too many live sandboxes")
	ErrSeedPhase   = errors.New("the seed phase is over")
	ErrInvalidArgs = errors.New("invalid arguments")
)

// Manager holds the live sessions.
type Manager struct {
	backend Backend
	lim     Limits
	log     *slog.Logger
	journal *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	gone     map[string]string // closed or expired ids: why
	byBox    map[string]*Session
	closed   bool
	stop     chan struct{}
	done     chan struct{}

	// spare is a sandbox started ahead, so that sandbox_create need not
	// wait for one to start: at most one, made after each create while
	// there is room for another session (sessions plus spare never exceed
	// MaxSessions), closed with the Manager.
	spare     chan spareBox
	spareBusy bool // a spare is being started
}

// spareBox is a started spare, or why it could not start.
type spareBox struct {
	box Box
	err error
}

// NewManager returns a Manager whose sessions run on b within lim (zero
// fields: DefaultLimits). log gets diagnostics; journal (nil: log) each
// session's audit, with its sandbox's id (SODA_SANDBOX=). Close it.
func NewManager(b Backend, lim Limits, log, journal *slog.Logger) *Manager {
	lim.fill()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if journal == nil {
		journal = log
	}
	m := &Manager{backend: b, lim: lim, log: log, journal: journal, sessions: map[string]*Session{},
		gone: map[string]string{}, byBox: map[string]*Session{}, stop: make(chan struct{}), done: make(chan struct{}),
		spare: make(chan spareBox, 1)}
	go m.expire()
	return m
}

// Limits returns the Manager's limits.
func (m *Manager) Limits() Limits { return m.lim }

// expire ends the sessions idle for IdleExpiry.
func (m *Manager) expire() {
	defer close(m.done)
	t := time.NewTicker(max(min(m.lim.IdleExpiry/8, 30*time.Second), 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var idle []*Session
		for _, s := range m.sessions {
			if time.Now().After(s.used.Add(m.lim.IdleExpiry)) { // s.used is m.mu's
				idle = append(idle, s)
			}
		}
		m.mu.Unlock()
		for _, s := range idle {
			if s.mu.TryLock() { // a call in progress keeps it alive
				if time.Now().After(s.expiresLocked()) {
					s.endLocked(context.Background(), "expire", fmt.Sprintf("idle for %s", m.lim.IdleExpiry))
				}
				s.mu.Unlock()
			}
		}
	}
}

// Close ends every session and stops the Manager.
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	var all []*Session
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	if sp := m.takeSpare(true); sp.box != nil {
		_ = sp.box.Close(ctx)
	}
	for _, s := range all {
		s.mu.Lock()
		s.endLocked(ctx, "close", "the server is stopping")
		s.mu.Unlock()
	}
}

// Egress records an egress attempt of the sandbox whose box id is boxID
// (the backend's audit hook calls it).
func (m *Manager) Egress(boxID, target, decision, detail string) {
	m.mu.Lock()
	s := m.byBox[boxID]
	m.mu.Unlock()
	if s != nil {
		s.note(Event{Kind: "egress", Target: target, Decision: decision, Detail: detail})
	}
}

// Get returns the live session id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[id]; s != nil {
		return s, nil
	}
	if why, ok := m.gone[id]; ok {
		return nil, fmt.Errorf("sandbox %s: %s; ids are never reopened (create a new one): %w", id, why, ErrUnknown)
	}
	return nil, fmt.Errorf("sandbox %q: %w (sandbox_create makes one)", id, ErrUnknown)
}

// Create starts a session, seeded with files (its baseline).
func (m *Manager) Create(ctx context.Context, files []File) (*Session, []Event, error) {
	dec, err := decodeFiles(files, maxFilesPerCall, m.lim.Quota)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, nil, errors.New("the server is stopping")
	}
	if len(m.sessions) >= m.lim.MaxSessions {
		n := len(m.sessions)
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %d of %d run; close one (sandbox_close)", ErrTooMany, n, m.lim.MaxSessions)
	}
	id := newID()
	s := &Session{m: m, id: id, created: time.Now(), baseline: map[string]Entry{}, audit: &auditLog{max: m.lim.MaxAudit}}
	s.used = s.created
	m.sessions[id] = s // reserved while it starts
	m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.call = []Event{}
	t0 := time.Now()
	var box Box
	if sp := m.takeSpare(false); sp.box != nil || sp.err != nil {
		box, err = sp.box, sp.err
	} else {
		box, err = m.backend.Start(ctx, m.lim.Quota)
	}
	tStart := time.Since(t0)
	m.refillSpare()
	if err != nil {
		m.mu.Lock()
		delete(m.sessions, id)
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("start the sandbox: %w", err)
	}
	s.box = box
	s.log = m.journal.With("sandbox", box.ID(), "session", id)
	m.mu.Lock()
	m.byBox[box.ID()] = s
	m.mu.Unlock()
	s.note(Event{Kind: "create", Call: "sandbox_create", Detail: fmt.Sprintf("%s sandbox %s, workspace %d bytes", m.backend.Mode(), box.ID(), m.lim.Quota)})
	if len(dec) > 0 {
		if err := s.seedLocked(ctx, dec); err != nil {
			s.endLocked(context.WithoutCancel(ctx), "close", "its seed failed")
			return nil, nil, err
		}
	}
	m.log.Debug("session created", "session", id, "start", tStart, "seed", time.Since(t0)-tStart, "files", len(dec))
	return s, s.takeCall(), nil
}

// takeSpare returns the spare, waiting for one being started; wait also
// waits when none is (Close). An empty spareBox: none.
func (m *Manager) takeSpare(closing bool) spareBox {
	m.mu.Lock()
	busy := m.spareBusy
	m.mu.Unlock()
	if busy {
		sp := <-m.spare
		m.mu.Lock()
		m.spareBusy = false
		m.mu.Unlock()
		return sp
	}
	select {
	case sp := <-m.spare:
		return sp
	default:
		return spareBox{}
	}
}

// refillSpare starts a spare in the background when there is room for
// one more session and none is there or starting.
func (m *Manager) refillSpare() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.spareBusy || len(m.spare) > 0 || len(m.sessions)+1 > m.lim.MaxSessions {
		return
	}
	m.spareBusy = true
	go func() {
		box, err := m.backend.Start(context.Background(), m.lim.Quota)
		m.spare <- spareBox{box, err}
	}()
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "sbx-" + hex.EncodeToString(b[:])
}

// Session is one live sandbox and its workspace's baseline.
type Session struct {
	m       *Manager
	id      string
	created time.Time
	log     *slog.Logger

	mu       sync.Mutex // one call at a time
	box      Box
	used     time.Time
	ran      bool // something ran: the seed phase is over
	baseline map[string]Entry
	ended    bool
	call     []Event // the current call's events

	audit *auditLog
}

// ID is the session's opaque id.
func (s *Session) ID() string { return s.id }

// BoxID is its sandbox's id (journal: SODA_SANDBOX).
func (s *Session) BoxID() string {
	if s.box == nil {
		return ""
	}
	return s.box.ID()
}

// Expires is when the session ends unless a call comes.
func (s *Session) Expires() time.Time {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.used.Add(s.m.lim.IdleExpiry)
}

func (s *Session) expiresLocked() time.Time { return s.Expires() }

// begin starts a call: the lock, the use time, the call's events.
func (s *Session) begin() error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		_, err := s.m.Get(s.id)
		return err
	}
	s.m.mu.Lock()
	s.used = time.Now()
	s.m.mu.Unlock()
	s.call = []Event{}
	return nil
}

// end ends a call and returns its events.
func (s *Session) end() []Event {
	evs := s.takeCall()
	s.m.mu.Lock()
	s.used = time.Now()
	s.m.mu.Unlock()
	s.mu.Unlock()
	return evs
}

func (s *Session) takeCall() []Event {
	evs := s.call
	s.call = nil
	if evs == nil {
		evs = []Event{}
	}
	return evs
}

// note records e in the audit log, the journal and the current call.
func (s *Session) note(e Event) {
	e = s.audit.add(e)
	if s.call != nil {
		s.call = append(s.call, e)
	}
	if s.log != nil {
		attrs := []any{"kind", e.Kind, "seq", e.Seq}
		if e.Call != "" {
			attrs = append(attrs, "call", e.Call)
		}
		if len(e.Argv) > 0 {
			attrs = append(attrs, "argv", strings.Join(e.Argv, " "))
		}
		if e.Code != nil {
			attrs = append(attrs, "code", *e.Code)
		}
		if e.Target != "" {
			attrs = append(attrs, "target", e.Target, "decision", e.Decision)
		}
		if e.Detail != "" {
			attrs = append(attrs, "detail", e.Detail)
		}
		lvl := slog.LevelInfo
		if e.Kind == "refused" || e.Kind == "quota" || e.Kind == "timeout" || e.Kind == "memory" || e.Kind == "tasks" || e.Decision == "deny" {
			lvl = slog.LevelWarn
		}
		s.log.Log(context.Background(), lvl, "session "+e.Kind, attrs...)
	}
}

// endLocked closes the session's sandbox (s.mu held) and forgets it.
func (s *Session) endLocked(ctx context.Context, kind, why string) {
	if s.ended {
		return
	}
	s.ended = true
	s.note(Event{Kind: kind, Detail: why})
	if s.box != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		if err := s.box.Close(cctx); err != nil {
			s.m.log.Warn("close a session's sandbox", "session", s.id, "err", err)
		}
		cancel()
	}
	s.baseline = nil
	s.m.mu.Lock()
	delete(s.m.sessions, s.id)
	if s.box != nil {
		delete(s.m.byBox, s.box.ID())
	}
	reason := "closed"
	if kind == "expire" {
		reason = "expired after " + s.m.lim.IdleExpiry.String() + " idle"
	}
	s.m.gone[s.id] = reason
	s.m.mu.Unlock()
}

// Close ends the session.
func (s *Session) Close(ctx context.Context) ([]Event, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	s.endLocked(ctx, "close", "sandbox_close")
	evs := s.call
	s.call = nil
	s.mu.Unlock()
	return evs, nil
}

// capture keeps the first n bytes written to it and counts the rest.
type capture struct {
	buf  bytes.Buffer
	n    int
	lost int64
}

func (c *capture) Write(p []byte) (int, error) {
	room := c.n - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
	} else {
		if room > 0 {
			c.buf.Write(p[:room])
		}
		c.lost += int64(len(p) - max(room, 0))
	}
	return len(p), nil
}

// run runs argv in the sandbox (s.mu held).
func (s *Session) run(ctx context.Context, argv []string, dir string, stdin []byte, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error) {
	if timeout <= 0 || timeout > s.m.lim.ExecTimeout {
		timeout = s.m.lim.ExecTimeout
	}
	var in io.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	return s.box.Exec(ctx, argv, dir, in, stdout, stderr, timeout)
}

// Workspace is the workspace's path inside the sandbox.
const Workspace = "/workspace"

// tarIn extracts a tar stream into the workspace (s.mu held).
func (s *Session) tarIn(ctx context.Context, data []byte) error {
	var errb capture
	errb.n = 4096
	st, err := s.run(ctx, []string{"tar", "-x", "-p", "-f", "-", "-C", Workspace}, Workspace, data, io.Discard, &errb, 0)
	if err != nil {
		return fmt.Errorf("write into the workspace: %w", err)
	}
	if st.Code != 0 {
		msg := strings.TrimSpace(errb.buf.String())
		if strings.Contains(msg, "No space left on device") {
			s.note(Event{Kind: "quota", Detail: fmt.Sprintf("the workspace is full (%d bytes)", s.m.lim.Quota)})
		}
		return fmt.Errorf("write into the workspace: tar exited %d: %s", st.Code, msg)
	}
	return nil
}

// tarOut reads paths of the workspace (all: ".") as a snapshot (s.mu held).
func (s *Session) tarOut(ctx context.Context, paths ...string) (map[string]Entry, error) {
	argv := []string{"tar", "-c", "-f", "-", "-C", Workspace, "--ignore-failed-read", "--"}
	argv = append(argv, paths...)
	pr, pw := io.Pipe()
	type parsed struct {
		snap map[string]Entry
		err  error
	}
	res := make(chan parsed, 1)
	limit := s.m.lim.Quota + s.m.lim.Quota/8 + 1<<20
	go func() {
		snap, _, err := parseTar(pr, maxEntries, limit)
		_, _ = io.Copy(io.Discard, pr) // never block the writer
		res <- parsed{snap, err}
	}()
	var errb capture
	errb.n = 4096
	st, err := s.run(ctx, argv, Workspace, nil, pw, &errb, 0)
	pw.Close()
	p := <-res
	if err != nil {
		return nil, fmt.Errorf("read the workspace: %w", err)
	}
	if st.Code != 0 && st.Code != 1 {
		return nil, fmt.Errorf("read the workspace: tar exited %d: %s", st.Code, strings.TrimSpace(errb.buf.String()))
	}
	return p.snap, p.err
}

// Seed adds files to the baseline (and the workspace); refused once
// anything has run or been written.
func (s *Session) Seed(ctx context.Context, files []File) ([]Event, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	dec, err := decodeFiles(files, maxFilesPerCall, s.m.lim.Quota)
	if err == nil {
		err = s.seedLocked(ctx, dec)
	} else {
		err = fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	return s.end(), err
}

func (s *Session) seedLocked(ctx context.Context, dec []decoded) error {
	if s.ran {
		s.note(Event{Kind: "refused", Call: "sandbox_seed", Detail: "the seed phase is over"})
		return fmt.Errorf("%w: something has run or been written in sandbox %s; its baseline is fixed (sandbox_write_files changes the workspace)", ErrSeedPhase, s.id)
	}
	if err := s.tarIn(ctx, tarOf(dec)); err != nil {
		return err
	}
	for _, f := range dec {
		addBaseline(s.baseline, f)
	}
	s.note(Event{Kind: "seed", Detail: fmt.Sprintf("%d files into the baseline", len(dec))})
	return nil
}

// addBaseline records f and its parent directories.
func addBaseline(b map[string]Entry, f decoded) {
	segs := strings.Split(f.path, "/")
	for i := 1; i < len(segs); i++ {
		d := strings.Join(segs[:i], "/")
		if _, ok := b[d]; !ok {
			b[d] = Entry{Type: "dir", Mode: 0o755}
		}
	}
	b[f.path] = Entry{Type: "file", Mode: f.mode, Data: f.data}
}

// WriteFiles writes files into the workspace (the baseline stays). All or
// nothing: if one cannot be written, those written are put back.
func (s *Session) WriteFiles(ctx context.Context, files []File) ([]Event, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	dec, err := decodeFiles(files, maxFilesPerCall, s.m.lim.Quota)
	if err != nil {
		return s.end(), fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	s.ran = true
	paths := make([]string, len(dec))
	for i, f := range dec {
		paths[i] = f.path
	}
	before, err := s.tarOut(ctx, paths...)
	if err != nil {
		return s.end(), err
	}
	if err := s.tarIn(ctx, tarOf(dec)); err != nil {
		s.restore(ctx, paths, before)
		return s.end(), fmt.Errorf("%w (nothing was changed)", err)
	}
	s.note(Event{Kind: "write", Detail: fmt.Sprintf("%d files: %s", len(dec), abbrev(paths))})
	return s.end(), nil
}

// restore puts paths back as before held them (s.mu held).
func (s *Session) restore(ctx context.Context, paths []string, before map[string]Entry) {
	argv := append([]string{"rm", "-rf", "--"}, paths...)
	_, _ = s.run(ctx, argv, Workspace, nil, io.Discard, io.Discard, 0)
	var back []decoded
	for _, p := range paths {
		if e, ok := before[p]; ok && e.Type == "file" {
			back = append(back, decoded{path: p, data: e.Data, mode: e.Mode})
		}
	}
	if len(back) > 0 {
		_ = s.tarIn(ctx, tarOf(back))
	}
}

// FileContent is a file read from the workspace.
type FileContent struct {
	Path     string `json:"path"`
	Exists   bool   `json:"exists"`
	Type     string `json:"type,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	Content  string `json:"content,omitempty"`
	Size     int64  `json:"size"`
	Mode     string `json:"mode,omitempty"`
	Target   string `json:"target,omitempty"`
}

// ReadFiles reads paths from the workspace without changing them: text
// as UTF-8 (encoding "" or utf-8; base64 when not text), or base64.
func (s *Session) ReadFiles(ctx context.Context, paths []string, encoding string) ([]FileContent, []Event, error) {
	if err := s.begin(); err != nil {
		return nil, nil, err
	}
	if len(paths) == 0 || len(paths) > maxFilesPerCall {
		return nil, s.end(), fmt.Errorf("%w: paths: 1 to %d", ErrInvalidArgs, maxFilesPerCall)
	}
	if encoding != "" && encoding != EncodingUTF8 && encoding != EncodingBase64 {
		return nil, s.end(), fmt.Errorf("%w: encoding %q: utf-8 or base64", ErrInvalidArgs, encoding)
	}
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return nil, s.end(), fmt.Errorf("%w: %v", ErrInvalidArgs, err)
		}
	}
	snap, err := s.tarOut(ctx, paths...)
	if err != nil {
		return nil, s.end(), err
	}
	out := make([]FileContent, 0, len(paths))
	for _, p := range paths {
		e, ok := snap[p]
		fc := FileContent{Path: p, Exists: ok}
		if ok {
			fc.Type, fc.Mode, fc.Target = e.Type, octal(e.Mode), e.Target
			if e.Type == "file" {
				fc.Size = int64(len(e.Data))
				if encoding == EncodingBase64 || isBinary(e.Data) {
					fc.Encoding, fc.Content = EncodingBase64, base64.StdEncoding.EncodeToString(e.Data)
				} else {
					fc.Encoding, fc.Content = EncodingUTF8, string(e.Data)
				}
			}
		}
		out = append(out, fc)
	}
	return out, s.end(), nil
}

// ExecRequest is one command for Exec.
type ExecRequest struct {
	// Command runs with sh -c; Argv runs as it is (one of the two).
	Command string
	Argv    []string
	// Dir is the working directory, relative to the workspace.
	Dir   string
	Stdin string
	// Timeout, at most the limit (0: the limit).
	Timeout time.Duration
}

// ExecResult is how a command ended, with its output.
type ExecResult struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// StdoutEncoding is base64 when the output is not UTF-8 text.
	StdoutEncoding string `json:"stdout_encoding,omitempty"`
	StderrEncoding string `json:"stderr_encoding,omitempty"`
	QuotaHit       bool   `json:"quota_hit,omitempty"`
	// MemoryLimitHit and TasksLimitHit say that the sandbox's memory limit
	// killed a process, or its task limit refused a fork, during the call
	// (where the backend can tell).
	MemoryLimitHit bool `json:"memory_limit_hit,omitempty"`
	TasksLimitHit  bool `json:"tasks_limit_hit,omitempty"`
}

func (r ExecRequest) argv() ([]string, error) {
	switch {
	case r.Command != "" && len(r.Argv) > 0:
		return nil, fmt.Errorf("%w: give command or argv, not both", ErrInvalidArgs)
	case r.Command != "":
		return []string{"/bin/sh", "-c", r.Command}, nil
	case len(r.Argv) > 0 && r.Argv[0] != "":
		return r.Argv, nil
	}
	return nil, fmt.Errorf("%w: command or argv is required", ErrInvalidArgs)
}

func workDir(rel string) (string, error) {
	if rel == "" || rel == "." {
		return Workspace, nil
	}
	if err := CheckPath(rel); err != nil {
		return "", fmt.Errorf("%w: dir: %v", ErrInvalidArgs, err)
	}
	return path.Join(Workspace, rel), nil
}

// Exec runs a command in the live sandbox, in the shared workspace.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (ExecResult, []Event, error) {
	if err := s.begin(); err != nil {
		return ExecResult{}, nil, err
	}
	res, err := s.execLocked(ctx, "sandbox_exec", req)
	return res, s.end(), err
}

func (s *Session) execLocked(ctx context.Context, tool string, req ExecRequest) (ExecResult, error) {
	argv, err := req.argv()
	if err != nil {
		return ExecResult{}, err
	}
	dir, err := workDir(req.Dir)
	if err != nil {
		return ExecResult{}, err
	}
	if req.Timeout < 0 {
		return ExecResult{}, fmt.Errorf("%w: timeout: negative", ErrInvalidArgs)
	}
	s.ran = true
	s.note(Event{Kind: "exec", Call: tool, Argv: argv})
	var out, errOut capture
	out.n, errOut.n = s.m.lim.MaxOutput, s.m.lim.MaxOutput
	var stdin []byte
	if req.Stdin != "" {
		stdin = []byte(req.Stdin)
	}
	st, err := s.run(ctx, argv, dir, stdin, &out, &errOut, req.Timeout)
	if err != nil {
		s.note(Event{Kind: "refused", Call: tool, Argv: argv, Detail: err.Error()})
		return ExecResult{}, fmt.Errorf("run %s: %w", argv[0], err)
	}
	hitMem, hitTasks := st.MemoryKills > 0, st.TasksRefused > 0
	if st.MemoryKills > 0 {
		s.note(Event{Kind: "memory", Call: tool, Argv: argv, Detail: fmt.Sprintf("the memory limit killed %d processes", st.MemoryKills)})
	}
	if st.TasksRefused > 0 {
		s.note(Event{Kind: "tasks", Call: tool, Argv: argv, Detail: fmt.Sprintf("the task limit refused %d forks", st.TasksRefused)})
	}
	if f, ok := s.box.(auditFeed); ok {
		for _, e := range f.auditSince(ctx) {
			e.Call = tool
			hitMem = hitMem || e.Kind == "memory"
			hitTasks = hitTasks || e.Kind == "tasks"
			s.note(e)
		}
	}
	r := ExecResult{ExitCode: st.Code, Signal: st.Signal, TimedOut: st.TimedOut,
		StdoutTruncated: out.lost > 0, StderrTruncated: errOut.lost > 0, MemoryLimitHit: hitMem, TasksLimitHit: hitTasks}
	r.Stdout, r.StdoutEncoding = textOrBase64(out.buf.Bytes())
	r.Stderr, r.StderrEncoding = textOrBase64(errOut.buf.Bytes())
	code := st.Code
	if st.TimedOut {
		s.note(Event{Kind: "timeout", Call: tool, Argv: argv, Detail: "killed at its time-out"})
	}
	if bytes.Contains(errOut.buf.Bytes(), []byte("No space left on device")) || bytes.Contains(out.buf.Bytes(), []byte("No space left on device")) {
		r.QuotaHit = true
		s.note(Event{Kind: "quota", Call: tool, Detail: fmt.Sprintf("a write failed: the workspace is full (%d bytes)", s.m.lim.Quota)})
	}
	s.note(Event{Kind: "exit", Call: tool, Argv: argv, Code: &code, Detail: st.Signal})
	return r, nil
}

func textOrBase64(b []byte) (string, string) {
	if utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// Diff compares the workspace with the baseline.
func (s *Session) Diff(ctx context.Context, unified bool) (Diff, []Event, error) {
	if err := s.begin(); err != nil {
		return Diff{}, nil, err
	}
	snap, err := s.tarOut(ctx, ".")
	if err != nil {
		return Diff{}, s.end(), err
	}
	return diff(s.baseline, snap, unified, maxUnified), s.end(), nil
}

// Reset puts the workspace back to the baseline; the audit stays.
func (s *Session) Reset(ctx context.Context) ([]Event, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	if err := s.resetLocked(ctx); err != nil {
		return s.end(), err
	}
	return s.end(), nil
}

func (s *Session) resetLocked(ctx context.Context) error {
	var errb capture
	errb.n = 4096
	st, err := s.run(ctx, []string{"find", Workspace, "-mindepth", "1", "-maxdepth", "1", "-exec", "rm", "-rf", "--", "{}", "+"}, Workspace, nil, io.Discard, &errb, 0)
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("find exited %d: %s", st.Code, strings.TrimSpace(errb.buf.String()))
	}
	if err != nil {
		return fmt.Errorf("reset: empty the workspace: %w", err)
	}
	var files []decoded
	for p, e := range s.baseline {
		if e.Type == "file" {
			files = append(files, decoded{path: p, data: e.Data, mode: e.Mode})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	if err := s.tarIn(ctx, tarOf(files)); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	s.note(Event{Kind: "reset", Detail: fmt.Sprintf("back to the baseline (%d files)", len(files))})
	return nil
}

// Audit reads the session's audit from cursor on.
func (s *Session) Audit(cursor uint64, n int) ([]Event, uint64, bool) {
	if n <= 0 || n > 1000 {
		n = 1000
	}
	return s.audit.read(cursor, n)
}

func abbrev(paths []string) string {
	if len(paths) <= 5 {
		return strings.Join(paths, " ")
	}
	return strings.Join(paths[:5], " ") + fmt.Sprintf(" and %d more", len(paths)-5)
}
