package session

import (
	"strings"
	"testing"
)

// TestRunScript: a script runs in the shared workspace (its changes stay),
// or in an isolated child seeded from workspace paths and inline files,
// whose changes are diffed and discarded.
func TestRunScript(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{
		file("lib/util.py", "def twice(x):\n    return 2 * x\n"),
		file("main.py", "import sys\nsys.path.insert(0, 'lib')\nfrom util import twice\nprint(twice(int(sys.argv[1])))\nopen('out.txt', 'w').write('done\\n')\n"),
		file("hello.js", "console.log('js ' + process.argv[2])\n"),
		file("hello.sh", "echo sh $1; touch sh-ran\n"),
	}})
	id := r.SandboxID
	for _, c := range []struct {
		entry, arg, want string
	}{{"main.py", "21", "42"}, {"hello.js", "x", "js x"}, {"hello.sh", "y", "sh y"}} {
		r, _ := must(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": c.entry, "args": []any{c.arg}})
		if r.Exec == nil || r.Exec.Stdout != c.want+"\n" || r.Isolated {
			t.Errorf("run %s: %+v", c.entry, r.Exec)
		}
	}
	// The shared runs changed the workspace.
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if r.Diff.Summary.Added < 2 {
		t.Errorf("shared runs left no changes: %+v", r.Diff)
	}

	// Isolated: the child has only what it was seeded with, its changes
	// come back as a diff and are discarded.
	r, text := must(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "main.py", "args": []any{"5"}, "isolated": true,
		"seed_paths": []any{"main.py", "lib"}, "files": []any{file("extra.txt", "inline\n")}, "diff": "unified"})
	if r.Exec == nil || r.Exec.Stdout != "10\n" || !r.Isolated || r.ChildDiff == nil {
		t.Fatalf("isolated run: %+v\n%s", r, text)
	}
	if !strings.Contains(r.ChildDiff.Unified, "+++ b/out.txt") || r.ChildDiff.Summary.Added != 1 {
		t.Errorf("child diff: %+v", r.ChildDiff)
	}
	r, _ = must(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "probe.sh", "isolated": true,
		"files": []any{file("probe.sh", "ls; cat hello.js 2>/dev/null || echo no-parent-files\n")}, "diff": "json"})
	if !strings.Contains(r.Exec.Stdout, "no-parent-files") || strings.Contains(r.Exec.Stdout, "out.txt") {
		t.Errorf("the isolated child saw the parent's files: %q", r.Exec.Stdout)
	}
	// Nothing of the child reached the parent.
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"extra.txt", "probe.sh"}})
	if r.Files[0].Exists || r.Files[1].Exists {
		t.Errorf("the child's files reached the parent: %+v", r.Files)
	}
	// The entry must be in the child's seed.
	if r, _, isErr := callRaw(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "nope.py", "isolated": true}); !isErr && r == nil {
		t.Errorf("isolated run of an entry not seeded: accepted")
	}
}
