package validate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// rawStdio is soda-validated --transport stdio driven frame by frame.
type rawStdio struct {
	in     io.WriteCloser
	out    chan string
	stderr *testkit.Buffer
}

// startRawStdio starts soda-validated KIND on stdio and initializes a
// session by hand.
func startRawStdio(t *testing.T, kind, conf string) *rawStdio {
	t.Helper()
	requireSandbox(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, kind+".conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", dir, "--state-dir", t.TempDir(), "--allow-degraded", "cgroup", kind)
	r := &rawStdio{out: make(chan string, 64), stderr: &testkit.Buffer{}}
	cmd.Stderr = r.stderr
	var err error
	if r.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			r.out <- sc.Text()
		}
		close(r.out)
	}()
	t.Cleanup(func() {
		r.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", r.stderr.String())
		}
	})
	r.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if resp := r.recv(t); !strings.Contains(resp, `"protocolVersion"`) {
		t.Fatalf("initialize: %s", resp)
	}
	r.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *rawStdio) send(t *testing.T, frame string) {
	t.Helper()
	if _, err := io.WriteString(r.in, frame+"\n"); err != nil {
		t.Fatalf("write a frame: %v (did soda-validated end?)", err)
	}
}

// recv is the next frame from soda-validated; it fails when none comes
// within 30 s or the stream ended.
func (r *rawStdio) recv(t *testing.T) string {
	t.Helper()
	select {
	case s, ok := <-r.out:
		if !ok {
			t.Fatal("soda-validated's stdout ended: the session is over")
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no response within 30 s")
	}
	return ""
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestStdioBadFrames: over --transport stdio every malformed frame gets
// its JSON-RPC error and the session goes on (a ping after each is
// answered); malformed Unicode (a lone surrogate escape, a raw 0xFF) in a
// call's content is refused on the raw bytes, never validated as U+FFFD;
// a frame over the 2 MiB limit is refused and skipped.
func TestStdioBadFrames(t *testing.T) {
	r := startRawStdio(t, "sh", "[Validator]\nExecStart=/bin/sh -c \"exit 0\" %FILES%\nFiles=*.sh\n")
	call := func(content string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"validate","arguments":{"files":[{"path":"a.sh","content":"` + content + `"}]}}}`
	}
	for i, c := range []struct {
		name, frame string
		code        int
		id          string // the error's id
	}{
		{"not JSON", `hello`, -32700, "null"},
		{"truncated", `{"jsonrpc":"2.0","id":3,`, -32700, "null"},
		{"a batch", `[1,2]`, -32600, "null"},
		{"a number", `42`, -32600, "null"},
		{"an object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, "null"},
		{"nested 1001 deep", `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}}`, -32600, "null"},
		{"a lone high surrogate in content", call(`echo \ud800`), -32700, "null"},
		{"a lone low surrogate in content", call(`echo \udc00 x`), -32700, "null"},
		{"a raw 0xFF in content", call("echo \xff"), -32700, "null"},
		{"a raw 0xFF in a name", strings.Replace(call("true"), "a.sh", "a\xff.sh", 1), -32700, "null"},
		{"a frame over 2 MiB", call(strings.Repeat("x", 2<<20)), -32600, "null"},
	} {
		r.send(t, c.frame)
		var resp rpcResponse
		line := r.recv(t)
		if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.Error == nil || resp.Error.Code != c.code || string(resp.ID) != c.id || resp.Result != nil {
			t.Errorf("%s: %.300s, want error %d with id %s", c.name, line, c.code, c.id)
		}
		ping := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 100+i)
		r.send(t, ping)
		line = r.recv(t)
		var pong rpcResponse
		if err := json.Unmarshal([]byte(line), &pong); err != nil || pong.Error != nil || pong.Result == nil || string(pong.ID) != fmt.Sprint(100+i) {
			t.Fatalf("after %s, a ping: %.300s", c.name, line)
		}
	}
	// A good call still works, and validates what was sent (a surrogate
	// pair is a character, not malformed).
	r.send(t, call(`echo \ud83d\ude00`))
	line := r.recv(t)
	var resp struct {
		Result struct {
			Structured verdict `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.Result.Structured.Verdict == nil || resp.Result.Structured.Digests.Sources["a.sh"] != sha("echo 😀") {
		t.Errorf("a good call after the bad frames: %.500s", line)
	}
}
