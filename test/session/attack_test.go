package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestBadArguments: arguments that do not match a tool's schema, and
// hostile paths, are JSON-RPC invalid-params errors naming the problem;
// an unknown id is an in-band error. Nothing reaches the host.
func TestBadArguments(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	tests := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"missing id", "sandbox_exec", map[string]any{"command": "true"}, "sandbox_id"},
		{"wrong type", "sandbox_exec", map[string]any{"sandbox_id": id, "command": 7}, "command"},
		{"unknown field", "sandbox_exec", map[string]any{"sandbox_id": id, "command": "true", "uid": 0}, "uid"},
		{"absolute path", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("/etc/passwd", "x")}}, "absolute"},
		{"traversal", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("a/../../etc/passwd", "x")}}, `".."`},
		{"NUL", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("a\x00b", "x")}}, "NUL"},
		{"device name", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("src/CON.txt", "x")}}, "device name"},
		{"backslash", "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{`..\x`}}, "backslash"},
		{"bad base64", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{map[string]any{"path": "b", "content": "%%%", "encoding": "base64"}}}, "base64"},
		{"setuid mode", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{map[string]any{"path": "b", "content": "x", "mode": 0o4755}}}, "permission bits"},
		{"host path seed", "sandbox_create", map[string]any{"files": []any{map[string]any{"path": "x", "host_path": "/etc/shadow"}}}, "host_path"},
		{"cwd escape", "sandbox_exec", map[string]any{"sandbox_id": id, "command": "pwd", "cwd": "../etc"}, `".."`},
		{"command and argv", "sandbox_exec", map[string]any{"sandbox_id": id, "command": "true", "argv": []any{"true"}}, "not both"},
		{"bad diff format", "sandbox_diff", map[string]any{"sandbox_id": id, "format": "html"}, "json or unified"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err %v, want a JSON-RPC invalid-params error naming %q", tc.tool, err, tc.want)
			}
		})
	}
	// Nothing was written: the workspace is as created.
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if len(r.Diff.Changes) != 0 {
		t.Errorf("refused calls changed the workspace: %+v", r.Diff.Changes)
	}
	if r, _, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": "sbx-000000000000000000000000", "command": "true"}); !isErr || !strings.Contains(r.Error, "no such sandbox") {
		t.Errorf("unknown id: %+v", r)
	}
}

// TestSymlinkPlanted: a symlink the sandbox plants to a host file reads
// as a symlink, never as the host file; a write through it stays in the
// sandbox.
func TestSymlinkPlanted(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "ln -s /etc/passwd pw && ln -s /etc etcdir"})
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"pw", "etcdir"}})
	if r.Files[0].Type != "symlink" || r.Files[0].Content != "" || r.Files[1].Type != "symlink" {
		t.Errorf("planted symlinks read as %+v", r.Files)
	}
	// A write over a planted link replaces the link in the workspace.
	must(t, cs, "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("pw", "mine\n")}})
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "cat pw; test -L pw && echo link || echo file"})
	if r.Exec.Stdout != "mine\nfile\n" {
		t.Errorf("write over a planted link: %q", r.Exec.Stdout)
	}
}

// TestIsolation: two sessions share nothing; the 9th is refused.
func TestIsolationAndLimit(t *testing.T) {
	cs, _ := server(t)
	var ids []string
	for i := 0; i < 8; i++ {
		r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("who", strings.Repeat("x", i+1))}})
		ids = append(ids, r.SandboxID)
	}
	if r, _, isErr := call(t, cs, "sandbox_create", nil); !isErr || !strings.Contains(r.Error, "too many") {
		t.Errorf("9th sandbox: %+v", r)
	}
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": ids[0], "command": "echo secret > s; sleep 30 >/dev/null 2>&1 &"})
	r, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": ids[1], "command": "cat who; ls /workspace; ps -e -o comm= | grep -c sleep || true"})
	if r.Exec.Stdout != "xxwho\n0\n" { // cat who: no newline
		t.Errorf("second sandbox sees %q", r.Exec.Stdout)
	}
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": ids[0]})
	must(t, cs, "sandbox_create", nil) // room again
}

// TestSerialized: calls on one sandbox run one at a time: a read during
// an exec sees the state before or after it, never half of it; two execs
// do not overlap.
func TestSerialized(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	var wg sync.WaitGroup
	starts := make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "if [ -e busy ]; then echo overlap; fi; touch busy; echo half > f; sleep 0.5; echo whole > f; rm busy; echo ok"})
			starts[i] = r.Exec.Stdout
		}()
	}
	time.Sleep(150 * time.Millisecond)
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"f"}})
	wg.Wait()
	for _, s := range starts {
		if s != "ok\n" {
			t.Errorf("concurrent execs overlapped: %q", s)
		}
	}
	if c := r.Files[0].Content; r.Files[0].Exists && c != "whole\n" {
		t.Errorf("a read during an exec saw %q", c)
	}
}

// TestQuotaTimeoutExpiry: a write past the workspace quota fails inside
// the sandbox and is reported; an execution past its time-out is killed;
// an idle sandbox expires and its id never reopens.
func TestQuotaTimeoutExpiry(t *testing.T) {
	cs, _ := server(t, "--quota", "8M", "--idle-expiry", "2s", "--exec-timeout", "2s")
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	r, text, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "head -c 16777216 /dev/zero > big"})
	if !isErr || r.Exec == nil || r.Exec.ExitCode == 0 || !r.Exec.QuotaHit || !strings.Contains(r.Exec.Stderr, "No space left") {
		t.Errorf("write past the quota: isError %v, %+v\n%s", isErr, r.Exec, text)
	}
	start := time.Now()
	r, _, isErr = call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "sleep 30", "timeout_seconds": 60})
	if !isErr || r.Exec == nil || !r.Exec.TimedOut || time.Since(start) > 10*time.Second {
		t.Errorf("exec past the time-out: %+v after %s", r.Exec, time.Since(start))
	}
	time.Sleep(3 * time.Second)
	if r, _, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "true"}); !isErr || !strings.Contains(r.Error, "expired") {
		t.Errorf("exec after the idle expiry: %+v", r)
	}
}

// TestLimitHits: a process the memory limit kills, and forks the task
// limit refuses, are in the result and the audit. A control first: the
// limits must be enforced here (the cgroup layer applied).
func TestLimitHits(t *testing.T) {
	cs, _ := server(t, "--memory", "64M", "--tasks", "40")
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	ctl, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"})
	if strings.TrimSpace(ctl.Exec.Stdout) != "67108864" {
		t.Skipf("host lacks: the memory limit is not enforced here (the sandbox's cgroup reads %q): no cgroup this engine may use", strings.TrimSpace(ctl.Exec.Stdout))
	}
	r, text, _ := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "python3 -c 'x = bytearray(400 << 20); print(len(x))'"})
	if r.Exec == nil || !strings.Contains(text, "memory") {
		t.Errorf("memory hog: %+v\n%s", r.Exec, text)
	}
	r, text, _ = call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "i=0; while [ $i -lt 80 ]; do sleep 2 & i=$((i+1)); done 2>/dev/null; wait"})
	if !strings.Contains(text, "tasks") {
		t.Errorf("fork bomb: %+v\n%s", r.Exec, text)
	}
	a, _ := must(t, cs, "sandbox_audit", map[string]any{"sandbox_id": id})
	kinds := map[string]bool{}
	for _, e := range a.Audit.Records {
		kinds[e.Kind] = true
	}
	if !kinds["memory"] || !kinds["tasks"] {
		t.Errorf("audit lacks the limit hits: %v", kinds)
	}
}
