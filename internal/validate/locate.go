package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/serverconf"
)

// TokenPath is the default bearer token file of kind's HTTP listener,
// STATE/KIND/token, made by soda-validated the first time it serves HTTP.
func TokenPath(stateDir, kind string) string { return filepath.Join(stateDir, kind, "token") }

// OwnerRecordPath is kind's owner record, STATE/KIND/owner.json.
func OwnerRecordPath(stateDir, kind string) string {
	return filepath.Join(stateDir, kind, "owner.json")
}

// ReadOwnerRecord reads kind's owner record under stateDir.
func ReadOwnerRecord(stateDir, kind string) (OwnerRecord, error) {
	path := OwnerRecordPath(stateDir, kind)
	data, err := os.ReadFile(path)
	if err != nil {
		return OwnerRecord{}, err
	}
	var r OwnerRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return OwnerRecord{}, fmt.Errorf("owner record %s: %w", path, err)
	}
	return r, nil
}

// Alive reports whether the record's owner still runs: its PID exists
// and, when recorded, started at ProcStart.
func (r OwnerRecord) Alive() bool {
	return runstate.Record{PID: r.PID, Start: r.ProcStart}.Alive()
}

// Endpoint is where a kind's HTTP listener is, as a client needs it.
type Endpoint struct {
	// Kind is the validator kind (shellcheck).
	Kind string
	// Listen is the listener's loopback address (host:port); "" when
	// neither a running worker nor KIND.conf names one.
	Listen string
	// TokenFile is the listener's bearer token file.
	TokenFile string
	// Config is KIND.conf as looked for, and Configured whether it
	// exists (when Listen came from it or none was found).
	Config     string
	Configured bool
	// Owner is the record of the running worker Listen and TokenFile
	// come from, at OwnerPath; nil when they come from Config and the
	// defaults.
	Owner     *OwnerRecord
	OwnerPath string
}

// From says, for a note to the user, where Listen was found.
func (e Endpoint) From() string {
	switch {
	case e.Owner != nil:
		return fmt.Sprintf("the running soda-validated %s (pid %d, %s)", e.Kind, e.Owner.PID, e.OwnerPath)
	case e.Listen != "":
		return "[Listener] Listen= of " + e.Config
	}
	return "nowhere"
}

// Locate finds kind's HTTP listener from what soda-validated writes: the
// addresses and token file that a running worker of kind recorded in its
// owner record (STATE/KIND/owner.json), else [Listener] Listen= of
// DIR/KIND.conf, the address soda-validate@KIND.socket listens on, with
// the default token file (TokenPath). A missing KIND.conf is no error
// (Listen is then ""); one that does not parse, or an owner record that
// cannot be read for want of permission, is.
func Locate(configDir, stateDir, kind string) (Endpoint, error) {
	if err := serverconf.ValidName(kind); err != nil {
		return Endpoint{}, fmt.Errorf("validator kind %q: %w", kind, err)
	}
	e := Endpoint{Kind: kind, TokenFile: TokenPath(stateDir, kind), Config: filepath.Join(configDir, kind+".conf")}
	rec, err := ReadOwnerRecord(stateDir, kind)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return Endpoint{}, fmt.Errorf("cannot read %s: permission denied; run sodactl as root (sudo): "+
			"the validation workers' state is root's", OwnerRecordPath(stateDir, kind))
	case err == nil && rec.Alive() && len(rec.Listen) > 0:
		e.Listen, e.Owner, e.OwnerPath = rec.Listen[0], &rec, OwnerRecordPath(stateDir, kind)
		if rec.TokenFile != "" {
			e.TokenFile = rec.TokenFile
		}
		return e, nil
	}
	// No worker serves HTTP (a missing or corrupt record, a stopped one,
	// one on stdio): the unit's address, as its socket listens on it.
	k, err := LoadKind(configDir, kind)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return e, nil
	case err != nil:
		return Endpoint{}, err
	}
	e.Configured, e.Listen = true, k.Listen
	return e, nil
}
