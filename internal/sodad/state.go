package sodad

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox"
)

// Record is what sodad keeps on disk about one sandbox, in
// STATE/sandboxes/ID.json: enough to say, after a crash, whose sandbox it
// was and which unit to make sure is stopped, and for a successor to
// adopt it (see adopt.go).
type Record struct {
	ID           string    `json:"id"`
	OwnerUID     uint32    `json:"owner_uid"`
	Profile      string    `json:"profile"`
	Unit         string    `json:"unit"`
	Argv         []string  `json:"argv"`
	MCP          []string  `json:"mcp,omitempty"`
	Allow        []string  `json:"allow,omitempty"`
	AllowPrivate []string  `json:"allow_private,omitempty"`
	Created      time.Time `json:"created"`
	// Supervisor is the pid of the sodad that started or adopted it.
	Supervisor int `json:"supervisor"`
	// What its object on the bus shows, for a successor that adopts it.
	ReadWrite []string          `json:"rw,omitempty"`
	ReadOnly  []string          `json:"ro,omitempty"`
	NoNetwork bool              `json:"no_network,omitempty"`
	Limits    map[string]uint64 `json:"limits,omitempty"`
	// Handover is what a successor needs to adopt it, with its
	// descriptors from the fd store; nil: it cannot be adopted.
	Handover *sandbox.HandoverState `json:"handover,omitempty"`
}

// Store is the state directory: the records, under a lock file held by the
// one sodad using it for its whole life.
type Store struct {
	dir  string
	lock *os.File
}

// OpenStore makes dir (0700) and its sandboxes/ directory if needed and
// takes dir/sodad.lock; a lock held by another process is an error saying
// so (two sodads must never share a state directory).
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sandboxes"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "sodad.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state lock %s: held by another sodad", f.Name())
		}
		return nil, fmt.Errorf("state lock %s: %w", f.Name(), err)
	}
	return &Store{dir: dir, lock: f}, nil
}

// Close releases the lock.
func (s *Store) Close() error { return s.lock.Close() }

func (s *Store) path(id string) string {
	return filepath.Join(s.dir, "sandboxes", id+".json")
}

// Write stores r atomically: a temporary file renamed over the record.
// Nothing is synced to disk: a record matters while the sandbox can run,
// and no sandbox outlives the machine; after a power loss a record cut
// short is an unreadable one, removed at the next start (fsync cost each
// CreateSandbox milliseconds).
func (s *Store) Write(r Record) error {
	if !validID(r.ID) {
		return fmt.Errorf("state record: invalid id %q", r.ID)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("state record %s: %w", r.ID, err)
	}
	dir := filepath.Join(s.dir, "sandboxes")
	tmp, err := os.CreateTemp(dir, "."+r.ID+".*")
	if err != nil {
		return fmt.Errorf("state record %s: %w", r.ID, err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.path(r.ID))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("state record %s: %w", r.ID, werr)
	}
	return nil
}

// Remove deletes the record of id (none is not an error).
func (s *Store) Remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state record %s: %w", id, err)
	}
	return nil
}

// List reads every record, sorted by id. A file that does not parse is
// returned as an error of its own (and left for the caller to remove);
// left-over temporary files are removed.
func (s *Store) List() ([]Record, []error) {
	dir := filepath.Join(s.dir, "sandboxes")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("state records: %w", err)}
	}
	var out []Record
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		var r Record
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err == nil && r.ID != id {
			err = fmt.Errorf("holds id %q", r.ID)
		}
		if err != nil {
			errs = append(errs, &RecordError{ID: id, Path: filepath.Join(dir, name), Err: err})
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, errs
}

// RecordError is a state record that could not be read.
type RecordError struct {
	ID, Path string
	Err      error
}

func (e *RecordError) Error() string { return fmt.Sprintf("state record %s: %v", e.Path, e.Err) }

// validID is the engine's rule for a sandbox id: 1 to 64 of [A-Za-z0-9-].
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
