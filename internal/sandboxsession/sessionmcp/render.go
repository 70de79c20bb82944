package sessionmcp

import (
	"fmt"
	"strings"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// render is a result's text: everything a client that reads only the
// text content needs.
func render(r *Result) string {
	var b strings.Builder
	state := "ok"
	if !r.OK {
		state = "FAILED: " + r.Error
	}
	if r.SandboxID != "" {
		fmt.Fprintf(&b, "%s %s: %s\n", r.Tool, r.SandboxID, state)
	} else {
		fmt.Fprintf(&b, "%s: %s\n", r.Tool, state)
	}
	if r.ExpiresAt != "" {
		fmt.Fprintf(&b, "expires: %s (unless used)\n", r.ExpiresAt)
	}
	if l := r.Limits; l != nil {
		fmt.Fprintf(&b, "limits: %d sandboxes, workspace %d bytes, idle expiry %ds, %ds per execution (%s)\n",
			l.MaxSandboxes, l.QuotaBytes, l.IdleExpirySeconds, l.ExecTimeoutSeconds, l.Backend)
	}
	if e := r.Exec; e != nil {
		fmt.Fprintf(&b, "exit code: %d", e.ExitCode)
		if e.Signal != "" {
			fmt.Fprintf(&b, " (%s)", e.Signal)
		}
		if e.TimedOut {
			b.WriteString(" (timed out)")
		}
		if e.QuotaHit {
			b.WriteString(" (workspace full)")
		}
		if e.MemoryLimitHit {
			b.WriteString(" (memory limit hit)")
		}
		if e.TasksLimitHit {
			b.WriteString(" (task limit hit)")
		}
		if r.Isolated {
			b.WriteString(" (isolated child, discarded)")
		}
		b.WriteString("\n")
		stream := func(name, s, enc string, cut bool) {
			if s == "" && !cut {
				return
			}
			fmt.Fprintf(&b, "--- %s", name)
			if enc != "" {
				fmt.Fprintf(&b, " (%s)", enc)
			}
			if cut {
				b.WriteString(" (truncated)")
			}
			b.WriteString(" ---\n")
			b.WriteString(s)
			if !strings.HasSuffix(s, "\n") {
				b.WriteString("\n")
			}
		}
		stream("stdout", e.Stdout, e.StdoutEncoding, e.StdoutTruncated)
		stream("stderr", e.Stderr, e.StderrEncoding, e.StderrTruncated)
	}
	for _, f := range r.Files {
		switch {
		case !f.Exists:
			fmt.Fprintf(&b, "--- %s: no such file ---\n", f.Path)
		case f.Type == "symlink":
			fmt.Fprintf(&b, "--- %s: symlink to %s ---\n", f.Path, f.Target)
		case f.Type != "file":
			fmt.Fprintf(&b, "--- %s: %s ---\n", f.Path, f.Type)
		default:
			fmt.Fprintf(&b, "--- %s (%d bytes, mode %s, %s) ---\n%s", f.Path, f.Size, f.Mode, f.Encoding, f.Content)
			if !strings.HasSuffix(f.Content, "\n") {
				b.WriteString("\n")
			}
		}
	}
	for _, d := range []*sandboxsession.Diff{r.Diff, r.ChildDiff} {
		if d == nil {
			continue
		}
		s := d.Summary
		fmt.Fprintf(&b, "diff: %d added, %d modified, %d deleted, %d mode, %d type changes\n", s.Added, s.Modified, s.Deleted, s.Mode, s.Type)
		if d.Unified != "" {
			b.WriteString(d.Unified)
		} else {
			for _, c := range d.Changes {
				fmt.Fprintf(&b, "%s %s (%s)", c.Kind, c.Path, c.Type)
				if c.Binary {
					b.WriteString(" binary")
				}
				if c.Target != "" || c.OldTarget != "" {
					fmt.Fprintf(&b, " %s -> %s", c.OldTarget, c.Target)
				}
				if c.OldMode != "" || c.Mode != "" {
					fmt.Fprintf(&b, " mode %s -> %s", c.OldMode, c.Mode)
				}
				b.WriteString("\n")
			}
		}
		if d.Truncated {
			b.WriteString("(unified diff truncated)\n")
		}
	}
	if a := r.Audit; a != nil {
		for _, e := range a.Records {
			b.WriteString(eventLine(e))
		}
		fmt.Fprintf(&b, "next cursor: %d; journal: journalctl %s", a.NextCursor, a.JournalMatch)
		if a.JournalCursor != "" {
			fmt.Fprintf(&b, " --cursor '%s'", a.JournalCursor)
		}
		b.WriteString("\n")
	} else {
		for _, e := range r.Events {
			b.WriteString(eventLine(e))
		}
	}
	return b.String()
}

func eventLine(e sandboxsession.Event) string {
	s := fmt.Sprintf("audit #%d %s", e.Seq, e.Kind)
	if len(e.Argv) > 0 {
		s += " " + strings.Join(e.Argv, " ")
	}
	if e.Code != nil {
		s += fmt.Sprintf(" exit %d", *e.Code)
	}
	if e.Target != "" {
		s += " " + e.Target + " " + e.Decision
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s + "\n"
}
