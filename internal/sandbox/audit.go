package sandbox

import (
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/llmgateway"
)

// Record is one entry of a sandbox's audit trail: its start with what was
// granted, each layer applied or waived, the environment keys dropped,
// every egress attempt, and its end.
type Record struct {
	// Seq numbers a sandbox's records from 1 in the order they were made;
	// every sink gets the same numbers, so the journal's copy and a JSON
	// file can be matched, and a gap shows a record left out.
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Event is start, layer, env, ready, egress, llm (a request through
	// the model gateway: LLM has it), refused (the sandbox did
	// not start, or, during the run, the repository guard undid what the
	// agent planted in a repository it made: Detail says what),
	// protected (the guard protected a repository made during the run:
	// Detail names it; see internal/sandboxinit/repoguard_linux.go), planted (what
	// the run made where no mount could protect it and the host may run:
	// Detail lists the paths), grant or revoke (an egress grant added or
	// taken away while the sandbox runs: Grants holds it, By who asked,
	// Detail the grants in force after), exit, exec and exec-exit (a
	// command of a live sandbox started, with its pid inside, and ended,
	// with its status), or dropped (a sink's summary of the egress records
	// it left out).
	Event  string `json:"event"`
	Layer  Layer  `json:"layer,omitempty"`
	State  string `json:"state,omitempty"` // applied or degraded
	Detail string `json:"detail,omitempty"`
	// Image is the image the sandbox's system comes from, on the start
	// record (REF@sha256:…; empty: the host's).
	Image      string   `json:"image,omitempty"`
	Argv       []string `json:"argv,omitempty"`
	ReadOnly   []string `json:"ro,omitempty"`
	ReadWrite  []string `json:"rw,omitempty"`
	Grants     []string `json:"grants,omitempty"`
	Limits     *Limits  `json:"limits,omitempty"`
	Degradable []Layer  `json:"allow_degraded,omitempty"`
	// Unprotected lists the protected paths the caller left writable
	// (--unprotect), on the start record.
	Unprotected []string      `json:"unprotected,omitempty"`
	Dropped     []EnvDrop     `json:"env_dropped,omitempty"`
	Pid         int           `json:"pid,omitempty"`
	Egress      *egress.Event `json:"egress,omitempty"`
	// LLM is a request through the run's model gateway (Event llm):
	// provider, method, path, status, bytes, tokens; never a key.
	LLM        *llmgateway.Event `json:"llm,omitempty"`
	Exit       *ExitStatus       `json:"exit,omitempty"`
	DurationMS float64           `json:"duration_ms,omitempty"`
	// By is who asked for a grant or revoke.
	By string `json:"by,omitempty"`
}
