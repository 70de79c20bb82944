package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/workhome"
)

// DefaultStateDir holds one owner directory per kind.
const DefaultStateDir = "/var/lib/soda/validate"

// Owner is a kind's owner directory, STATE/KIND: a lock held by the one
// worker using it (stdio and HTTP cannot own it at once), its owner record
// (owner.json), tmp/, where the sandboxes' homes live while they run, and
// the HTTP listener's default token file (TokenPath).
type Owner struct {
	dir  string
	lock *os.File

	mu  sync.Mutex // guards rec
	rec OwnerRecord
}

// OwnerRecord is owner.json.
type OwnerRecord struct {
	Kind    string    `json:"kind"`
	Created time.Time `json:"created"`
	// PID and Started are the current owner's.
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// ProcStart is the owner's start time in clock ticks since boot
	// (runstate.ProcStart), which tells it from a later process that
	// reuses its PID.
	ProcStart uint64 `json:"start_time,omitempty"`
	// Listen holds the TCP addresses (host:port) the owner serves over
	// HTTP, and TokenFile the bearer token it checks: what "sodactl
	// validate client-config" reads. Empty over stdio.
	Listen    []string `json:"listen,omitempty"`
	TokenFile string   `json:"token_file,omitempty"`
	// Poisoned says why the worker refuses work (a clean-up failed), until
	// an operator resolves it (soda-validated --reconcile KIND).
	Poisoned string `json:"poisoned,omitempty"`
}

// OpenOwner takes kind's owner directory under stateDir: made with a new
// record on the kind's first start; otherwise its lock must be free (no
// other worker) and its record readable. A missing or corrupt record is
// refused with what to do, never made anew; reconcile (after an operator
// checked that nothing of the kind runs) writes a fresh one.
func OpenOwner(stateDir, kind string, reconcile bool) (*Owner, error) {
	dir := filepath.Join(stateDir, kind)
	first := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		first = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("owner directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("owner lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("owner directory %s is held by another soda-validated of kind %s (stdio and HTTP cannot own it at once): stop that one first", dir, kind)
		}
		return nil, fmt.Errorf("owner lock: %w", err)
	}
	o := &Owner{dir: dir, lock: f}
	recPath := filepath.Join(dir, "owner.json")
	data, err := os.ReadFile(recPath)
	switch {
	case first || reconcile:
		o.rec = OwnerRecord{Kind: kind, Created: time.Now().UTC()}
	case errors.Is(err, os.ErrNotExist):
		f.Close()
		return nil, fmt.Errorf("owner record %s is missing although the directory exists: refusing to make a new one. Check that no sandbox of this kind runs (systemctl list-units 'soda-sandbox-validate-%s-*'), then start once with --reconcile", recPath, kind)
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("owner record: %w", err)
	default:
		if err := json.Unmarshal(data, &o.rec); err != nil || o.rec.Kind != kind {
			f.Close()
			return nil, fmt.Errorf("owner record %s is corrupt (%v): refusing to replace it. Check that no sandbox of this kind runs, then start once with --reconcile", recPath, err)
		}
	}
	o.rec.PID, o.rec.Started = os.Getpid(), time.Now().UTC()
	o.rec.ProcStart, _ = runstate.ProcStart(o.rec.PID)
	o.rec.Listen, o.rec.TokenFile = nil, "" // a predecessor's; SetServing records ours
	if err := o.write(); err != nil {
		f.Close()
		return nil, err
	}
	return o, nil
}

// SetServing records in the owner record that the worker serves HTTP on
// the TCP addresses listen, behind the token in tokenFile (absolute).
func (o *Owner) SetServing(listen []string, tokenFile string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec.Listen, o.rec.TokenFile = slices.Clone(listen), tokenFile
	return o.write()
}

// TmpDir is where the sandboxes' homes are made.
func (o *Owner) TmpDir() string { return filepath.Join(o.dir, "tmp") }

// Recover removes what a killed predecessor left in TmpDir (the engine's
// sweep removes its sandboxes' cgroups and scopes) and returns how many.
func (o *Owner) Recover() (int, error) {
	tmp := o.TmpDir()
	ents, err := os.ReadDir(tmp)
	if errors.Is(err, os.ErrNotExist) {
		return 0, os.MkdirAll(tmp, 0o700)
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			return n, fmt.Errorf("remove a predecessor's %s: %w", e.Name(), err)
		}
		n++
	}
	return n, nil
}

// CheckSettled returns an error naming what is left in TmpDir that no
// live sandbox holds: called after a sandbox's clean-up, anything there
// but a live sandbox's home (the next spare's, whose lock is held) is a
// home that a clean-up did not remove.
func (o *Owner) CheckSettled() error {
	names, err := workhome.Leftovers(o.TmpDir())
	if err != nil {
		return fmt.Errorf("check the owner directory: %w", err)
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("left behind in %s: %s", o.TmpDir(), strings.Join(names, " "))
}

// Poisoned says why the worker refuses work ("" when it does not).
func (o *Owner) Poisoned() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rec.Poisoned
}

// Poison records why the worker must refuse work from now on, across
// restarts.
func (o *Owner) Poison(why string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec.Poisoned = why
	return o.write()
}

// write writes the record; o.mu is held, or o is not shared yet.
func (o *Owner) write() error {
	data, _ := json.MarshalIndent(o.rec, "", "  ")
	tmp := filepath.Join(o.dir, ".owner.json.new")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("owner record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(o.dir, "owner.json")); err != nil {
		return fmt.Errorf("owner record: %w", err)
	}
	return nil
}

// Close releases the ownership.
func (o *Owner) Close() error { return o.lock.Close() }

// String names the directory.
func (o *Owner) String() string { return strings.TrimSuffix(o.dir, "/") }
