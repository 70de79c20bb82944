package sessionmcp

import (
	"testing"

	"github.com/soda-project/soda/internal/sandboxsession"
)

// TestRender: the text of a result holds what a text-only client needs,
// line by line.
func TestRender(t *testing.T) {
	code := 1
	tests := []struct {
		name string
		r    Result
		want string
	}{
		{"failed without an id", Result{Tool: "sandbox_create", Error: "too many live sandboxes", Events: []sandboxsession.Event{}},
			"sandbox_create: FAILED: too many live sandboxes\n"},
		{"output cut to nothing", Result{Tool: "sandbox_exec", SandboxID: "s", OK: true, Exec: &sandboxsession.ExecResult{StdoutTruncated: true, Stderr: "warn"}},
			"sandbox_exec s: ok\nexit code: 0\n--- stdout (truncated) ---\n\n--- stderr ---\nwarn\n"},
		{"file without a final newline", Result{Tool: "sandbox_read_files", SandboxID: "s", OK: true,
			Files: []sandboxsession.FileContent{{Path: "a", Exists: true, Type: "file", Encoding: "utf-8", Content: "x", Size: 1, Mode: "0600"}, {Path: "p", Exists: true, Type: "other"}}},
			"sandbox_read_files s: ok\n--- a (1 bytes, mode 0600, utf-8) ---\nx\n--- p: other ---\n"},
		{"mode change", Result{Tool: "sandbox_diff", SandboxID: "s", OK: true,
			Diff: &sandboxsession.Diff{Summary: sandboxsession.DiffSummary{Mode: 1}, Changes: []sandboxsession.Change{{Path: "run.sh", Kind: "mode", Type: "file", OldMode: "0644", Mode: "0755"}}}},
			"sandbox_diff s: ok\ndiff: 0 added, 0 modified, 0 deleted, 1 mode, 0 type changes\nmode run.sh (file) mode 0644 -> 0755\n"},
		{"audit without journald", Result{Tool: "sandbox_audit", SandboxID: "s", OK: true, Events: []sandboxsession.Event{{Seq: 50, Kind: "hidden"}},
			Audit: &AuditPage{Records: []sandboxsession.Event{{Seq: 2, Kind: "exit", Argv: []string{"false"}, Code: &code}}, NextCursor: 3, JournalMatch: "SODA_SANDBOX=b"}},
			"sandbox_audit s: ok\naudit #2 exit false exit 1\nnext cursor: 3; journal: journalctl SODA_SANDBOX=b\n"},
	}
	for _, tt := range tests {
		if got := render(&tt.r); got != tt.want {
			t.Errorf("%s: render =\n%q\nwant\n%q", tt.name, got, tt.want)
		}
	}
}
