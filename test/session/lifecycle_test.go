package session

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// TestStdoutPurity: the server's standard output holds JSON-RPC messages
// and nothing else, whatever the sandbox prints.
func TestStdoutPurity(t *testing.T) {
	requireSandbox(t)
	cmd := exec.Command(filepath.Join(bin, "sodactl"), "sandbox", "mcp", "--direct", "--allow-degraded", "cgroup")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A reply that never comes fails the test instead of hanging it.
	watchdog := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()
	send := func(id int, method string, params any) {
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		fmt.Fprintf(in, "%s\n", msg)
	}
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	read := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("stdout ended: %v", lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil || m["jsonrpc"] != "2.0" {
			t.Fatalf("stdout line is not JSON-RPC: %q", lines.Text())
		}
		return m
	}
	send(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}})
	read()
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(2, "tools/call", map[string]any{"name": "sandbox_create", "arguments": map[string]any{}})
	r := read()
	id := r["result"].(map[string]any)["structuredContent"].(map[string]any)["sandbox_id"].(string)
	send(3, "tools/call", map[string]any{"name": "sandbox_exec", "arguments": map[string]any{"sandbox_id": id, "command": "echo to-stdout; echo to-stderr >&2; printf '{\"jsonrpc\":\"2.0\"}'"}})
	if r := read(); r["id"].(float64) != 3 {
		t.Errorf("reply %v", r)
	}
	send(4, "no/such/method", map[string]any{})
	if r := read(); r["error"] == nil {
		t.Errorf("unknown method: %v", r)
	}
	send(6, "tools/list", map[string]any{})
	if r := read(); r["id"] != float64(6) {
		t.Errorf("reply %v", r)
	}
}

// TestKilledServerLeavesNothing: kill -9 of the server ends every sandbox
// it ran (their init dies with it); nothing is left running.
func TestKilledServerLeavesNothing(t *testing.T) {
	cs, _ := server(t)
	for i := 0; i < 3; i++ {
		r, _ := must(t, cs, "sandbox_create", nil)
		must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": r.SandboxID, "command": "sleep 300 >/dev/null 2>&1 &"})
	}
	srv := serverPID(t)
	inits := testkit.Inits(srv)
	if len(inits) < 3 {
		t.Fatalf("%d sandbox inits under the server, want at least 3", len(inits))
	}
	var all []int
	for _, p := range inits {
		all = append(all, p)
		all = append(all, testkit.Descendants(p)...)
	}
	if err := syscall.Kill(srv, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var alive []int
		for _, p := range all {
			if testkit.Alive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the sandboxes still alive 10 s after kill -9 of the server: %v", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
