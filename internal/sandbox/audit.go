package sandbox

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// Record is one entry of a sandbox's audit trail: its start with what was
// granted, each layer applied or waived, the environment keys dropped,
// every egress attempt, and its end.
type Record struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Event is start, layer, env, ready, egress, refused or exit.
	Event      string        `json:"event"`
	Layer      Layer         `json:"layer,omitempty"`
	State      string        `json:"state,omitempty"` // applied or degraded
	Detail     string        `json:"detail,omitempty"`
	Argv       []string      `json:"argv,omitempty"`
	ReadOnly   []string      `json:"ro,omitempty"`
	ReadWrite  []string      `json:"rw,omitempty"`
	Grants     []string      `json:"grants,omitempty"`
	Limits     *Limits       `json:"limits,omitempty"`
	Degradable []Layer       `json:"allow_degraded,omitempty"`
	Dropped    []EnvDrop     `json:"env_dropped,omitempty"`
	Pid        int           `json:"pid,omitempty"`
	Egress     *egress.Event `json:"egress,omitempty"`
	Exit       *ExitStatus   `json:"exit,omitempty"`
	DurationMS float64       `json:"duration_ms,omitempty"`
}

func (sb *Sandbox) record(r Record) {
	r.Time = time.Now()
	r.Sandbox = sb.ID
	if r.Event == "egress" && r.Egress != nil {
		lvl := slog.LevelInfo
		if r.Egress.Decision != "allow" {
			lvl = slog.LevelWarn
		}
		sb.log.Log(nil, lvl, "egress "+r.Egress.Decision, "kind", r.Egress.Kind, "target", r.Egress.Target,
			"addr", r.Egress.Addr, "reason", r.Egress.Reason, "bytes_up", r.Egress.BytesUp, "bytes_down", r.Egress.BytesDown)
	}
	if sb.audit != nil {
		sb.audit(r)
	}
}

// JSONAudit writes records as JSON lines to w; safe for concurrent use.
type JSONAudit struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewJSONAudit returns an audit sink writing JSON lines to w.
func NewJSONAudit(w io.Writer) *JSONAudit { return &JSONAudit{enc: json.NewEncoder(w)} }

// Write appends one record.
func (a *JSONAudit) Write(r Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.enc.Encode(r)
}

// walkChown changes the owner of dir and everything below it (not
// following symlinks).
func walkChown(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
