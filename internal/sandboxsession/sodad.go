package sandboxsession

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"

	"github.com/soda-project/soda/internal/sodadclient"
)

// Sodad is the Backend of sodad's live sandboxes: each session is a
// persistent sandbox sodad owns, under the caller's identity (the bus's)
// and Profile, with its allow-list and limits (narrowed by Spec).
type Sodad struct {
	Client  *sodadclient.Client
	Profile string
	// Spec narrows the profile for every sandbox (Persistent and
	// WorkspaceSize are set per sandbox).
	Spec sodadclient.Spec
	// Interactive lets polkit ask for a password.
	Interactive bool
}

// Mode implements Backend.
func (s *Sodad) Mode() string { return "sodad" }

// Start implements Backend.
func (s *Sodad) Start(ctx context.Context, quota int64) (Box, error) {
	spec := s.Spec
	spec.Persistent, spec.WorkspaceSize = true, uint64(quota)
	sb, err := s.Client.Create(ctx, sodadclient.Request{Profile: s.Profile, Spec: spec, Interactive: s.Interactive})
	if err != nil {
		return nil, err
	}
	return &sodadBox{sb: sb}, nil
}

type sodadBox struct {
	sb     *sodadclient.Sandbox
	cursor uint64 // sodad's audit, read up to here (egressSince)
}

// auditSince implements auditFeed: the egress records sodad kept since
// the last read.
func (b *sodadBox) auditSince(ctx context.Context) []Event {
	var out []Event
	for range 10 { // at most 10 pages a call
		recs, next, err := b.sb.ReadAudit(ctx, b.cursor, 1000)
		if err != nil || len(recs) == 0 {
			break
		}
		b.cursor = next
		for _, line := range recs {
			var r struct {
				Event  string `json:"event"`
				Egress *struct {
					Target   string `json:"target"`
					Decision string `json:"decision"`
					Reason   string `json:"reason"`
				} `json:"egress"`
			}
			if json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			// Limit hits come with the exec's status (ExecWith), not
			// from the audit: they would be counted twice.
			if r.Event == "egress" && r.Egress != nil {
				out = append(out, Event{Kind: "egress", Target: r.Egress.Target, Decision: r.Egress.Decision, Detail: r.Egress.Reason})
			}
		}
	}
	return out
}

func (b *sodadBox) ID() string { return b.sb.ID }

// Exec implements Box.
func (b *sodadBox) Exec(ctx context.Context, argv []string, dir string, stdin io.Reader, stdout, stderr io.Writer, timeout time.Duration) (ExitStatus, error) {
	return withPipes(stdin, stdout, stderr, func(in, out, errOut *os.File) (ExitStatus, error) {
		// EndOthers: nothing the command started outlives the call.
		st, err := b.sb.ExecWith(ctx, argv, sodadclient.ExecOptions{Dir: dir, Timeout: timeout, EndOthers: true}, sodadclient.Stdio{Stdin: in, Stdout: out, Stderr: errOut})
		return ExitStatus{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut, WorkspaceFull: st.WorkspaceFull,
			MemoryKills: st.MemoryKills, TasksRefused: st.TasksRefused}, err
	})
}

// Close implements Box: the sandbox is killed, and its end waited for.
func (b *sodadBox) Close(ctx context.Context) error {
	defer b.sb.Close()
	if err := b.sb.Kill(ctx, 9, false); err != nil {
		if errors.Is(err, sodadclient.ErrNotRunning) {
			return nil
		}
		return err
	}
	_, err := b.sb.Wait(ctx)
	return err
}
