package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

var bin string // the directory of sodactl and soda-sandbox-init

func TestMain(m *testing.M) {
	dir, err := testkit.BuildBinaries("soda-session-test-", "sodactl", "soda-sandbox-init")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireSandbox skips where the host cannot make a sandbox.
func requireSandbox(t *testing.T) { testkit.RequireSandbox(t) }

// server starts sodactl sandbox mcp --direct with extra flags and
// connects the go-sdk client to it.
func server(t *testing.T, flags ...string) (*mcp.ClientSession, *testkit.Buffer) {
	t.Helper()
	requireSandbox(t)
	args := append([]string{"sandbox", "mcp", "--direct", "--allow-degraded", "cgroup"}, flags...)
	cmd := exec.Command(filepath.Join(bin, "sodactl"), args...)
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "soda-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to sodactl sandbox mcp: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("server stderr:\n%s", stderr)
		}
	})
	return cs, stderr
}

// result is the structured result of a tool call.
type result struct {
	Tool      string `json:"tool"`
	SandboxID string `json:"sandbox_id"`
	OK        bool   `json:"ok"`
	Error     string `json:"error"`
	ExpiresAt string `json:"expires_at"`
	Exec      *struct {
		ExitCode        int    `json:"exit_code"`
		TimedOut        bool   `json:"timed_out"`
		Stdout          string `json:"stdout"`
		Stderr          string `json:"stderr"`
		StdoutTruncated bool   `json:"stdout_truncated"`
		QuotaHit        bool   `json:"quota_hit"`
	} `json:"exec"`
	Isolated  bool  `json:"isolated"`
	ChildDiff *diff `json:"child_diff"`
	Files     []struct {
		Path     string `json:"path"`
		Exists   bool   `json:"exists"`
		Type     string `json:"type"`
		Encoding string `json:"encoding"`
		Content  string `json:"content"`
		Target   string `json:"target"`
	} `json:"files"`
	Diff   *diff             `json:"diff"`
	Events []json.RawMessage `json:"events"`
	Audit  *struct {
		Records []struct {
			Seq  uint64 `json:"seq"`
			Kind string `json:"kind"`
		} `json:"records"`
		NextCursor   uint64 `json:"next_cursor"`
		JournalMatch string `json:"journal_match"`
	} `json:"audit"`
}

type diff struct {
	Summary struct {
		Added, Modified, Deleted, Mode, Type int
	} `json:"summary"`
	Changes []struct {
		Path, Kind, Type string
		Binary           bool
		Target           string
		Unaddressable    string `json:"unaddressable"`
		NoLineDiff       string `json:"no_line_diff"`
	} `json:"changes"`
	Unified string `json:"unified"`
}

// call calls tool and decodes its structured result; text is its text.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (result, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var r result
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s: structured content: %v: %s", tool, err, data)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if r.OK == res.IsError {
		t.Errorf("%s: ok %v but isError %v", tool, r.OK, res.IsError)
	}
	return r, text.String(), res.IsError
}

// must calls tool and fails unless it succeeded.
func must(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (result, string) {
	t.Helper()
	r, text, isErr := call(t, cs, tool, args)
	if isErr {
		t.Fatalf("%s: %s\n%s", tool, r.Error, text)
	}
	return r, text
}

func file(path, content string) map[string]any {
	return map[string]any{"path": path, "content": content}
}

// TestDiscovery: the ten tools with input and output schemas, and the
// server's stdout holds nothing but JSON-RPC (the client would fail on
// anything else).
func TestDiscovery(t *testing.T) {
	cs, _ := server(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sandbox_create", "sandbox_seed", "sandbox_write_files", "sandbox_read_files", "sandbox_exec",
		"sandbox_run_script", "sandbox_diff", "sandbox_reset", "sandbox_audit", "sandbox_close"}
	got := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
	}
	for _, name := range want {
		tl := got[name]
		if tl == nil {
			t.Errorf("tool %s missing", name)
			continue
		}
		if tl.InputSchema == nil || tl.OutputSchema == nil || tl.Description == "" {
			t.Errorf("tool %s: input schema %v, output schema %v, description %q", name, tl.InputSchema != nil, tl.OutputSchema != nil, tl.Description)
		}
	}
	if len(res.Tools) != len(want) {
		t.Errorf("%d tools, want %d", len(res.Tools), len(want))
	}
}

// TestWorkflow is the whole seed → exec → diff → reset → close workflow on
// a real sandbox, with real sh, python3, node and git, persistence across
// calls, both diff formats, and the text rendering alone being enough.
func TestWorkflow(t *testing.T) {
	cs, _ := server(t)
	r, text := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("src/app.py", "print('hello')\n"), file("README", "seed\n")}})
	id := r.SandboxID
	if !strings.HasPrefix(id, "sbx-") || r.ExpiresAt == "" || !strings.Contains(text, id) {
		t.Fatalf("create: id %q expires %q text %q", id, r.ExpiresAt, text)
	}
	// Seed phase: more seed files are fine before anything ran.
	must(t, cs, "sandbox_seed", map[string]any{"sandbox_id": id, "files": []any{file("data/bin", "\x00\x01"), map[string]any{"path": "run.sh", "content": "echo run\n", "mode": 0o755}}})

	// Real programs, state kept across calls.
	for _, c := range []struct{ cmd, want string }{
		{"python3 src/app.py", "hello"},
		{"node -e 'console.log(6*7)'", "42"},
		{"echo one > state.txt && cat README", "seed"},
		{"cat state.txt && id -u", "one"},
		{"git init -q repo && cd repo && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x && git log --oneline | wc -l", "1"},
		{"./run.sh", "run"},
	} {
		r, text := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": c.cmd})
		if r.Exec == nil || r.Exec.ExitCode != 0 || !strings.Contains(r.Exec.Stdout, c.want) || !strings.Contains(text, c.want) {
			t.Errorf("exec %q: %+v; text %q", c.cmd, r.Exec, text)
		}
	}
	// A failing command is an in-band error with its whole run.
	r, text, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "echo out; echo err >&2; exit 3"})
	if !isErr || r.Exec == nil || r.Exec.ExitCode != 3 || r.Exec.Stdout != "out\n" || r.Exec.Stderr != "err\n" || !strings.Contains(text, "exit code: 3") {
		t.Errorf("exit 3: isError %v, %+v, text %q", isErr, r.Exec, text)
	}
	// Seeding is over now.
	if r, _, isErr := call(t, cs, "sandbox_seed", map[string]any{"sandbox_id": id, "files": []any{file("late", "x")}}); !isErr || !strings.Contains(r.Error, "seed phase") {
		t.Errorf("seed after exec: %+v", r)
	}

	must(t, cs, "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("src/app.py", "print('changed')\n")}})
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "rm README && ln -s src/app.py link && chmod 700 run.sh && printf '\\377' > data/bin"})
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"src/app.py", "link", "data/bin", "missing"}})
	if len(r.Files) != 4 || r.Files[0].Content != "print('changed')\n" || r.Files[1].Type != "symlink" || r.Files[1].Target != "src/app.py" ||
		r.Files[2].Encoding != "base64" || r.Files[2].Content != base64.StdEncoding.EncodeToString([]byte{0xff}) || r.Files[3].Exists {
		t.Errorf("read files: %+v", r.Files)
	}

	r, text = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	d := r.Diff
	kinds := map[string]string{}
	for _, c := range d.Changes {
		kinds[c.Path] = c.Kind
	}
	for p, k := range map[string]string{"src/app.py": "modified", "README": "deleted", "link": "added", "run.sh": "mode", "data/bin": "modified", "state.txt": "added"} {
		if kinds[p] != k {
			t.Errorf("diff: %s is %q, want %q (changes %+v)", p, kinds[p], k, d.Changes)
		}
	}
	if !strings.Contains(text, "deleted README") {
		t.Errorf("diff text lacks the deletion: %s", text)
	}
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id, "format": "unified"})
	for _, want := range []string{"-print('hello')", "+print('changed')", "Binary files a/data/bin and b/data/bin differ", "--- a/README"} {
		if !strings.Contains(r.Diff.Unified, want) {
			t.Errorf("unified diff lacks %q:\n%s", want, r.Diff.Unified)
		}
	}

	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if len(r.Diff.Changes) != 0 {
		t.Errorf("diff after reset: %+v", r.Diff.Changes)
	}
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "cat README; ls"})
	if !strings.Contains(r.Exec.Stdout, "seed") || strings.Contains(r.Exec.Stdout, "state.txt") {
		t.Errorf("after reset: %q", r.Exec.Stdout)
	}

	// The audit survives the reset, read with a cursor.
	r, _ = must(t, cs, "sandbox_audit", map[string]any{"sandbox_id": id, "max": 3})
	if len(r.Audit.Records) != 3 || r.Audit.NextCursor != r.Audit.Records[2].Seq+1 || !strings.HasPrefix(r.Audit.JournalMatch, "SODA_SANDBOX=") {
		t.Fatalf("audit page: %+v", r.Audit)
	}
	all := map[string]bool{}
	for cursor := r.Audit.NextCursor; ; {
		r, _ := must(t, cs, "sandbox_audit", map[string]any{"sandbox_id": id, "cursor": cursor})
		if len(r.Audit.Records) == 0 {
			break
		}
		for _, e := range r.Audit.Records {
			all[e.Kind] = true
		}
		cursor = r.Audit.NextCursor
	}
	for _, k := range []string{"exec", "exit", "refused", "write", "reset"} {
		if !all[k] {
			t.Errorf("audit lacks a %s event: %v", k, all)
		}
	}

	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": id})
	if r, _, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "true"}); !isErr || !strings.Contains(r.Error, "closed") {
		t.Errorf("exec after close: %+v", r)
	}
}

// callRaw calls tool and reports a JSON-RPC error as (nil, err, true).
func callRaw(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (*result, error, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, err, true
	}
	var r result
	data, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(data, &r)
	return &r, nil, res.IsError
}
