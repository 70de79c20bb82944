// Package auditsink is where a sandbox's audit trail (sandbox.Record) goes:
// a log, for the journal (one entry per record, its fields as SODA_*
// fields, egress records rate-limited), and a JSON-lines file (every
// record, egress records up to a size cap). Open combines them as sodactl
// run and a daemon use them.
package auditsink

import (
	"errors"
	"log/slog"
	"os"

	"github.com/soda-project/soda/internal/sandbox"
)

// Options says where Open sends the records.
type Options struct {
	// Journal, when not nil, gets every record as Log logs it (for
	// journald, a logger on systemd.NewJournalHandler: journalctl
	// SODA_SANDBOX=ID).
	Journal *slog.Logger
	// JSONPath, when not empty, is the file the records are appended to
	// as JSON lines; it is opened as sandbox.OpenAuditFile allows: outside
	// every one of Grants, no symbolic link followed.
	JSONPath string
	// JSONMax caps what the file takes before egress records are left out
	// (0: DefaultJSONMax).
	JSONMax int64
	// Grants are the directories granted to the sandbox (read-write or
	// read-only), where the JSON file may not be.
	Grants []string
}

// Sink is a sandbox's audit trail: its Write goes to every sink Open was
// given. It is safe for concurrent use.
type Sink struct {
	log  *Log
	json *JSON
	file *os.File
}

// Open opens the sinks that o names; its only failure is the JSON file's
// (OpenAuditFile's error, which names the file). With no sink named, Write
// discards the records.
func Open(o Options) (*Sink, error) {
	s := &Sink{}
	if o.JSONPath != "" {
		f, err := sandbox.OpenAuditFile(o.JSONPath, o.Grants)
		if err != nil {
			return nil, err
		}
		s.file, s.json = f, NewJSON(f, o.JSONMax)
	}
	if o.Journal != nil {
		s.log = NewLog(o.Journal)
	}
	return s, nil
}

// Write hands r to every sink; it is the sandbox engine's Audit function.
func (s *Sink) Write(r sandbox.Record) {
	if s.log != nil {
		s.log.Write(r)
	}
	if s.json != nil {
		s.json.Write(r)
	}
}

// Close writes the sinks' summaries of what they left out and closes the
// JSON file; call it once the sandboxes writing to s have ended.
func (s *Sink) Close() error {
	var errs []error
	if s.log != nil {
		s.log.Close()
	}
	if s.json != nil {
		errs = append(errs, s.json.Close())
	}
	if s.file != nil {
		errs = append(errs, s.file.Close())
	}
	return errors.Join(errs...)
}
