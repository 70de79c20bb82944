package sandboxsession

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
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
	// MaxSessions is how many sandboxes may be live at once (8): the
	// sessions, their isolated children while they run, and the spare
	// started ahead.
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
	// MaxRead is how many bytes of file contents one sandbox_read_files
	// returns (4 MiB); files past it are listed without their contents.
	MaxRead int64
	// StoreDir is where baselines are kept, in unlinked files (disk, not
	// the server's memory; default /var/tmp).
	StoreDir string
}

// DefaultLimits are the and the seed's defaults.
var DefaultLimits = Limits{MaxSessions: 8, Quota: 512 << 20, IdleExpiry: 4 * time.Hour, ExecTimeout: 5 * time.Minute,
	MaxOutput: 1 << 20, MaxAudit: 10000, MaxRead: 4 << 20, StoreDir: "/var/tmp"}

// Per-call bounds that follow from the limits.
const (
	maxFilesPerCall = 10000
	maxEntries      = 200000
	// closeTimeout bounds the end of one sandbox.
	closeTimeout = 15 * time.Second
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
	if l.MaxRead <= 0 {
		l.MaxRead = d.MaxRead
	}
	if l.StoreDir == "" {
		l.StoreDir = d.StoreDir
	}
}

// Errors a caller can tell apart.
var (
	ErrUnknown     = errors.New("no such sandbox")
	ErrTooMany     = errors.New("too many live sandboxes")
	ErrSeedPhase   = errors.New("the seed phase is over")
	ErrInvalidArgs = errors.New("invalid arguments")
	// ErrEnded: the session ended while the call ran (sandbox_close, the
	// idle expiry or the server's stop); the call was cancelled.
	ErrEnded = errors.New("the sandbox ended during the call")
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
	children int // isolated children running
	// discarding counts spares being closed after their taker gave up:
	// live until they are.
	discarding int
	closed     bool
	stop       chan struct{}
	done       chan struct{}

	// spare is a sandbox started ahead, so that sandbox_create need not
	// wait for one to start: at most one, counted as a live sandbox, made
	// after each create while there is room, closed with the Manager. A
	// spare is claimed by one taker only (claimSpare), so no two wait
	// for the same one.
	spare *spareBox
}

// spareBox is a spare being started or started: done is closed once box
// or err is set.
type spareBox struct {
	done chan struct{}
	box  Box
	err  error
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
		gone: map[string]string{}, byBox: map[string]*Session{}, stop: make(chan struct{}), done: make(chan struct{})}
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
			if s.busy == 0 && time.Now().After(s.used.Add(m.lim.IdleExpiry)) { // s.used, s.busy are m.mu's
				idle = append(idle, s)
			}
		}
		m.mu.Unlock()
		for _, s := range idle {
			if s.mu.TryLock() { // a call in progress keeps it alive
				if time.Now().After(s.Expires()) {
					s.endLocked(context.Background(), "expire", fmt.Sprintf("idle for %s", m.lim.IdleExpiry))
				}
				s.mu.Unlock()
			}
		}
	}
}

// Close ends every session, cancelling the calls in progress, and stops
// the Manager.
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
	if sp := m.claimSpare(); sp != nil {
		select {
		case <-sp.done:
			if sp.box != nil {
				_ = sp.box.Close(ctx)
			}
		case <-ctx.Done():
			go m.discard(sp)
		}
	}
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() {
			s.cancel(ErrEnded)
			s.mu.Lock()
			s.endLocked(ctx, "close", "the server is stopping")
			s.mu.Unlock()
		})
	}
	wg.Wait()
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

// liveLocked counts the live sandboxes (m.mu held): the sessions (those
// starting included), the isolated children, the spare.
func (m *Manager) liveLocked() int {
	n := len(m.sessions) + m.children + m.discarding
	if m.spare != nil {
		n++
	}
	return n
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
	// The spare holds a slot that a create may take: it is the one
	// counted when there is one.
	sp := m.spare
	if n := m.liveLocked(); n >= m.lim.MaxSessions && sp == nil {
		m.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %d of %d run (sessions and isolated children); close one (sandbox_close)", ErrTooMany, n, m.lim.MaxSessions)
	}
	m.spare = nil // claimed: no other taker waits for it
	id := newID()
	sctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{m: m, id: id, created: time.Now(), baseline: map[string]*Entry{}, audit: &auditLog{max: m.lim.MaxAudit},
		ctx: sctx, cancel: cancel}
	s.used = s.created
	m.sessions[id] = s // reserved while it starts
	m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startCall()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(sctx, func() { stop(context.Cause(sctx)) })()
	t0 := time.Now()
	box, err := m.startBox(ctx, sp)
	tStart := time.Since(t0)
	if err == nil {
		s.store, err = newBlobStore(m.lim.StoreDir, m.lim.Quota)
	}
	if err != nil {
		if box != nil {
			m.closeBox(ctx, box)
		}
		m.mu.Lock()
		delete(m.sessions, id)
		m.mu.Unlock()
		m.refillSpare()
		return nil, nil, fmt.Errorf("start the sandbox: %w", err)
	}
	m.refillSpare()
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

// startBox returns the claimed spare sp once it started (or, when it
// failed or there is none, a new sandbox). Waiting for a spare is bounded
// by ctx; a spare that starts after its taker gave up is closed.
func (m *Manager) startBox(ctx context.Context, sp *spareBox) (Box, error) {
	if sp != nil {
		select {
		case <-sp.done:
			if sp.err == nil {
				return sp.box, nil
			}
			m.log.Warn("the spare sandbox did not start; starting another", "err", sp.err)
		case <-ctx.Done():
			m.mu.Lock()
			m.discarding++
			m.mu.Unlock()
			go func() {
				m.discard(sp)
				m.mu.Lock()
				m.discarding--
				m.mu.Unlock()
				m.refillSpare()
			}()
			return nil, fmt.Errorf("waiting for the spare sandbox: %w", context.Cause(ctx))
		}
	}
	return m.backend.Start(ctx, m.lim.Quota)
}

// discard closes a spare that nobody will take, once it started.
func (m *Manager) discard(sp *spareBox) {
	<-sp.done
	if sp.box != nil {
		m.closeBox(context.Background(), sp.box)
	}
}

// claimSpare takes the spare (nil: none) so that no one else waits for it.
func (m *Manager) claimSpare() *spareBox {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.spare
	m.spare = nil
	return sp
}

// refillSpare starts a spare in the background when there is room for
// one more sandbox and none is there or starting.
func (m *Manager) refillSpare() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.spare != nil || m.liveLocked()+1 > m.lim.MaxSessions {
		return
	}
	sp := &spareBox{done: make(chan struct{})}
	m.spare = sp
	go func() {
		sp.box, sp.err = m.backend.Start(context.Background(), m.lim.Quota)
		close(sp.done)
	}()
}

func (m *Manager) closeBox(ctx context.Context, box Box) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if err := box.Close(cctx); err != nil {
		m.log.Warn("close a sandbox", "sandbox", box.ID(), "err", err)
	}
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
	// ctx ends with the session: every call's context derives from it,
	// so that sandbox_close, the idle expiry and the server's stop cancel
	// a call in progress instead of waiting for it.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex // one call at a time
	box      Box
	ran      bool // something ran: the seed phase is over
	baseline map[string]*Entry
	store    *blobStore // the baseline's contents
	ended    bool

	// used and busy are m.mu's: the last use, and calls waiting or running.
	used time.Time
	busy int

	callMu sync.Mutex // call, which the audit hook appends to too
	call   []Event    // the current call's events (nil: none)

	audit *auditLog
	// parent is an isolated child's session (see RunScript).
	parent *Session
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

// begin starts a call: the lock, the use time, the call's events, and a
// context that ends with the call's or the session's.
func (s *Session) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.m.mu.Lock()
	s.busy++
	s.m.mu.Unlock()
	s.mu.Lock()
	s.m.mu.Lock()
	s.busy--
	s.used = time.Now()
	s.m.mu.Unlock()
	if s.ended {
		s.mu.Unlock()
		_, err := s.m.Get(s.id)
		return nil, nil, err
	}
	s.startCall()
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return cctx, func() { stop(); cancel(nil) }, nil
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

func (s *Session) startCall() {
	s.callMu.Lock()
	s.call = []Event{}
	s.callMu.Unlock()
}

func (s *Session) takeCall() []Event {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	evs := s.call
	s.call = nil
	if evs == nil {
		evs = []Event{}
	}
	return evs
}

// note records e in the audit log, the journal and the current call (an
// isolated child's, in its parent's).
func (s *Session) note(e Event) {
	if s.parent != nil {
		s.parent.note(e)
		return
	}
	e = s.audit.add(e)
	s.callMu.Lock()
	if s.call != nil {
		s.call = append(s.call, e)
	}
	s.callMu.Unlock()
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
	s.cancel(ErrEnded)
	s.note(Event{Kind: kind, Detail: why})
	if s.box != nil {
		s.m.closeBox(ctx, s.box)
	}
	s.baseline = nil
	s.store.close()
	s.store = nil
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
	s.m.refillSpare()
}

// Close ends the session; a call in progress is cancelled first.
func (s *Session) Close(ctx context.Context) ([]Event, error) {
	s.m.mu.Lock()
	_, live := s.m.sessions[s.id]
	s.m.mu.Unlock()
	if live {
		s.cancel(ErrEnded)
	}
	_, done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s.endLocked(ctx, "close", "sandbox_close")
	return s.end(), nil
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
func (s *Session) run(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error) {
	if timeout <= 0 || timeout > s.m.lim.ExecTimeout {
		timeout = s.m.lim.ExecTimeout
	}
	st, err := s.box.Exec(ctx, argv, dir, stdin, stdout, stderr, timeout)
	if s.ctx.Err() != nil {
		// The session ended during the call (and killed what it ran).
		return st, context.Cause(s.ctx)
	}
	return st, err
}

// Workspace is the workspace's path inside the sandbox.
const Workspace = "/workspace"

// tarIn extracts a tar stream into the workspace (s.mu held).
func (s *Session) tarIn(ctx context.Context, data io.Reader) error {
	var errb capture
	errb.n = 4096
	st, err := s.run(ctx, []string{"tar", "-x", "-p", "-f", "-", "-C", Workspace}, Workspace, data, io.Discard, &errb, 0)
	if err != nil {
		return fmt.Errorf("write into the workspace: %w", err)
	}
	if st.WorkspaceFull {
		s.note(Event{Kind: "quota", Detail: fmt.Sprintf("the workspace is full (%d bytes)", s.m.lim.Quota)})
	}
	if st.Code != 0 {
		return fmt.Errorf("write into the workspace: tar exited %d: %s", st.Code, strings.TrimSpace(errb.buf.String()))
	}
	return nil
}

// snap takes a snapshot of the workspace (s.mu held); see snapshotScript.
func (s *Session) snap(ctx context.Context, o snapOpts) (*snapshot, error) {
	paths := o.paths
	if len(paths) == 0 {
		paths = []string{"."}
	}
	if o.maxBytes == 0 {
		o.maxBytes = s.m.lim.Quota + s.m.lim.Quota/8 + 1<<20
	}
	argv := append([]string{"bash", "-c", snapshotScript, "soda-snapshot"}, paths...)
	pr, pw := io.Pipe()
	type parsed struct {
		snap *snapshot
		err  error
	}
	res := make(chan parsed, 1)
	go func() {
		sn, err := snapshotOf(ctx, pr, o)
		// Read to its end, or not needed past here: the command's output
		// then goes nowhere (a partial read stops it on its pipe).
		pr.CloseWithError(errors.Join(err, errSnapshotDone))
		res <- parsed{sn, err}
	}()
	var errb capture
	errb.n = 4096
	// From /: the script enters the workspace itself, whatever its mode.
	st, err := s.run(ctx, argv, "/", nil, pw, &errb, 0)
	pw.Close()
	p := <-res
	if err != nil {
		return nil, fmt.Errorf("read the workspace: %w", err)
	}
	if p.err != nil {
		return nil, p.err
	}
	if st.Code != 0 && st.Code != 1 && !p.snap.partial {
		return nil, fmt.Errorf("read the workspace: the snapshot exited %d: %s", st.Code, strings.TrimSpace(errb.buf.String()))
	}
	return p.snap, nil
}

// errSnapshotDone closes a snapshot's pipe once it was read.
var errSnapshotDone = errors.New("snapshot read")

// Seed adds files to the baseline (and the workspace); refused once
// anything has run or been written.
func (s *Session) Seed(ctx context.Context, files []File) ([]Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
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
	if len(s.baseline)+len(dec) > maxEntries {
		return fmt.Errorf("%w: a baseline of more than %d entries", ErrInvalidArgs, maxEntries)
	}
	if err := s.tarIn(ctx, bytes.NewReader(tarOf(dec))); err != nil {
		return err
	}
	for _, f := range dec {
		off, err := s.store.putBytes(f.data)
		if err != nil {
			return fmt.Errorf("keep the baseline: %w", err)
		}
		addBaseline(s.baseline, f.path, &Entry{Type: "file", Mode: f.mode, Size: int64(len(f.data)), Sum: sumOf(f.data), off: off})
	}
	s.note(Event{Kind: "seed", Detail: fmt.Sprintf("%d files into the baseline", len(dec))})
	return nil
}

// addBaseline records e at p and p's parent directories.
func addBaseline(b map[string]*Entry, p string, e *Entry) {
	segs := strings.Split(p, "/")
	for i := 1; i < len(segs); i++ {
		d := strings.Join(segs[:i], "/")
		if _, ok := b[d]; !ok {
			b[d] = &Entry{Type: "dir", Mode: 0o755}
		}
	}
	b[p] = e
}

// WriteFiles writes files into the workspace (the baseline stays). All or
// nothing: if one cannot be written, those written are put back.
func (s *Session) WriteFiles(ctx context.Context, files []File) ([]Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	dec, err := decodeFiles(files, maxFilesPerCall, s.m.lim.Quota)
	if err != nil {
		return s.end(), fmt.Errorf("%w: %v", ErrInvalidArgs, err)
	}
	s.ran = true
	paths := make([]string, len(dec))
	for i, f := range dec {
		paths[i] = f.path
	}
	// What the paths held before, for the undo: on disk, not in memory.
	undo, err := newBlobStore(s.m.lim.StoreDir, s.m.lim.Quota+s.m.lim.Quota/8+1<<20)
	if err != nil {
		return s.end(), err
	}
	defer undo.close()
	before, err := s.snap(ctx, snapOpts{paths: paths, store: undo})
	if err != nil {
		return s.end(), err
	}
	for _, p := range paths {
		if e := before.entries[p]; e != nil && e.Type == "dir" {
			return s.end(), fmt.Errorf("%w: path %q is a directory in the workspace: remove it first (sandbox_exec rm -r)", ErrInvalidArgs, p)
		}
	}
	if err := s.tarIn(ctx, bytes.NewReader(tarOf(dec))); err != nil {
		s.restore(ctx, paths, before, undo)
		return s.end(), fmt.Errorf("%w (nothing was changed)", err)
	}
	s.note(Event{Kind: "write", Detail: fmt.Sprintf("%d files: %s", len(dec), abbrev(paths))})
	return s.end(), nil
}

// restore puts paths back as before held them, their contents in store
// (s.mu held).
func (s *Session) restore(ctx context.Context, paths []string, before *snapshot, store *blobStore) {
	ctx = context.WithoutCancel(ctx)
	argv := append([]string{"rm", "-rf", "--"}, paths...)
	_, _ = s.run(ctx, argv, Workspace, nil, io.Discard, io.Discard, 0)
	var back []decoded
	for _, p := range paths {
		if e := before.entries[p]; e != nil && e.Type == "file" && !e.Unread {
			back = append(back, decoded{path: p, mode: e.Mode, stored: true, off: e.off, n: e.Size})
		}
	}
	if len(back) > 0 {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, back, store)) }()
		_ = s.tarIn(ctx, pr)
		pr.Close()
	}
}

// sumOf is data's sha256.
func sumOf(data []byte) [32]byte { return sha256.Sum256(data) }

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
	// Omitted says why a file's contents are not here (past what one call
	// returns, unreadable).
	Omitted string `json:"omitted,omitempty"`
}

// ReadFiles reads paths from the workspace without changing them: text
// as UTF-8 (encoding "" or utf-8; base64 when not text), or base64. One
// call returns at most Limits.MaxRead bytes of contents; files past it
// are listed with their size and why they were left out.
func (s *Session) ReadFiles(ctx context.Context, paths []string, encoding string) ([]FileContent, []Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	if len(paths) == 0 || len(paths) > maxFilesPerCall {
		return nil, s.end(), fmt.Errorf("%w: paths: 1 to %d", ErrInvalidArgs, maxFilesPerCall)
	}
	if encoding != "" && encoding != EncodingUTF8 && encoding != EncodingBase64 {
		return nil, s.end(), fmt.Errorf("%w: encoding %q: utf-8 or base64", ErrInvalidArgs, encoding)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return nil, s.end(), fmt.Errorf("%w: %v", ErrInvalidArgs, err)
		}
		if seen[p] {
			return nil, s.end(), fmt.Errorf("%w: path %q: given twice", ErrInvalidArgs, p)
		}
		seen[p] = true
	}
	// Contents are kept in the order asked, each counted in full (a hard
	// link's too: the result holds it once per name), until MaxRead.
	budget := s.m.lim.MaxRead
	keep := func(name string, size int64) bool {
		if !seen[name] || size > budget {
			return false
		}
		budget -= size
		return true
	}
	snap, err := s.snap(ctx, snapOpts{paths: paths, keep: keep, keepMax: s.m.lim.MaxRead})
	if err != nil {
		return nil, s.end(), err
	}
	out := make([]FileContent, 0, len(paths))
	var total int64
	for _, p := range paths {
		e := snap.entries[p]
		fc := FileContent{Path: p, Exists: e != nil}
		if e != nil {
			fc.Type, fc.Mode, fc.Target = e.Type, modeOf(e), e.Target
			if e.Type == "file" {
				fc.Size = e.Size
				data, ok := snap.kept[p]
				switch {
				case e.Unread:
					fc.Omitted = "the file could not be read"
				case !ok || total+int64(len(data)) > s.m.lim.MaxRead:
					fc.Omitted = fmt.Sprintf("one call returns at most %d bytes of contents: read this file alone, or in parts with sandbox_exec (head -c, tail -c)", s.m.lim.MaxRead)
				case encoding == EncodingBase64 || isBinary(data):
					total += int64(len(data))
					fc.Encoding, fc.Content = EncodingBase64, base64.StdEncoding.EncodeToString(data)
				default:
					total += int64(len(data))
					fc.Encoding, fc.Content = EncodingUTF8, string(data)
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
	// QuotaHit says that the workspace filesystem was full (no free
	// blocks or inodes) during the command, as the sandbox's init saw it.
	QuotaHit bool `json:"quota_hit,omitempty"`
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

// Exec runs a command in the live sandbox, in the shared workspace. When
// it ends, every process it started ends too (the backend's sandboxes
// end them): nothing changes the workspace between calls.
func (s *Session) Exec(ctx context.Context, req ExecRequest) (ExecResult, []Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return ExecResult{}, nil, err
	}
	defer done()
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
	var stdin io.Reader
	if req.Stdin != "" {
		stdin = strings.NewReader(req.Stdin)
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
		s.note(Event{Kind: "tasks", Call: tool, Argv: argv, Detail: fmt.Sprintf("the task limit refused forks (at least %d)", st.TasksRefused)})
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
	if st.WorkspaceFull {
		r.QuotaHit = true
		s.note(Event{Kind: "quota", Call: tool, Detail: fmt.Sprintf("the workspace filled up (%d bytes)", s.m.lim.Quota)})
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
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return Diff{}, nil, err
	}
	defer done()
	o := snapOpts{}
	if unified {
		o.keep, o.keepMax = wantLines(s.baseline), maxKept
	}
	snap, err := s.snap(ctx, o)
	if err != nil {
		return Diff{}, s.end(), err
	}
	d, err := diffOf(ctx, diffIn{base: s.baseline, baseData: s.baseData, now: snap, unified: unified})
	return d, s.end(), err
}

// baseData reads a baseline file's contents.
func (s *Session) baseData(e *Entry) ([]byte, error) { return s.store.read(e.off, e.Size) }

// Reset puts the workspace back to the baseline; the audit stays.
func (s *Session) Reset(ctx context.Context) ([]Event, error) {
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.resetLocked(ctx); err != nil {
		return s.end(), err
	}
	return s.end(), nil
}

// resetScript empties the workspace whatever the agent did to modes (a
// directory it made unreadable or unwritable is opened up first, in the
// order find descends), then extracts the baseline from stdin.
const resetScript = `chmod 0755 ` + Workspace + ` || exit 3
cd ` + Workspace + ` || exit 3
find . -mindepth 1 -type d ! -perm -u=rwx -execdir chmod u+rwx -- {} \;
find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 4
exec tar -x -p -f - -C ` + Workspace

func (s *Session) resetLocked(ctx context.Context) error {
	var files []decoded
	for p, e := range s.baseline {
		if e.Type == "file" {
			files = append(files, decoded{path: p, mode: e.Mode, stored: true, off: e.off, n: e.Size})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, files, s.store)) }()
	defer pr.Close()
	var errb capture
	errb.n = 4096
	st, err := s.run(ctx, []string{"bash", "-c", resetScript}, "/", pr, io.Discard, &errb, 0)
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("exited %d: %s", st.Code, strings.TrimSpace(errb.buf.String()))
	}
	if err != nil {
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
