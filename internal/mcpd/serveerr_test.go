package mcpd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenerFD finds this process's descriptor of the TCP socket listening
// on 127.0.0.1:port, through /proc/net/tcp and /proc/self/fd.
func listenerFD(t *testing.T, port int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatalf("read /proc/net/tcp: %v", err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	inode := ""
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" {
			inode = f[9]
		}
	}
	if inode == "" {
		t.Fatalf("no listening socket on 127.0.0.1:%d in /proc/net/tcp", port)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "socket:["+inode+"]" {
			fd, _ := strconv.Atoi(e.Name())
			return fd
		}
	}
	t.Fatalf("socket inode %s is not open in this process", inode)
	return -1
}

// logRecord waits for the first JSON log line with msg and returns it.
func logRecord(t *testing.T, stderr *syncBuffer, exit <-chan int, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
				return rec
			}
		}
		select {
		case code := <-exit:
			t.Fatalf("Main returned %d before logging %q; stderr:\n%s", code, msg, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line within 10s; stderr:\n%s", msg, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunServeErrorStopsChildren: when serving fails (here the listener is
// shut down under the server), Run reports the error but first ends every
// session: no child outlives it.
func TestRunServeErrorStopsChildren(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "adhoc.token")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"--listen", "127.0.0.1:0", "--token-file", tokFile, "--log-format", "json", "--", echoBin}
	exit := make(chan int, 1)
	go func() { exit <- Main(ctx, args, &stdout, &stderr) }()
	serving := logRecord(t, &stderr, exit, "serving")
	u, err := url.Parse(serving["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	tok, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatal(err)
	}

	// One session, hence one child.
	req, _ := http.NewRequest(http.MethodPost, u.String(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	client.CloseIdleConnections()
	pid := int(logRecord(t, &stderr, exit, "session start")["pid"].(float64))
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("control: the session's child %d is not running: %v", pid, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })

	// Break the listener under the server: accept fails with EINVAL.
	if err := syscall.Shutdown(listenerFD(t, port), syscall.SHUT_RDWR); err != nil {
		t.Fatalf("shutdown(2) the listener: %v", err)
	}
	select {
	case code := <-exit:
		if code != 1 {
			t.Errorf("Main returned %d after a serve error, want 1", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Main did not return within 15s of the serve error; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "serve: ") {
		t.Errorf("the serve error is not reported; stderr:\n%s", stderr.String())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child %d still exists after Run returned (kill 0: %v); stderr:\n%s", pid, err, stderr.String())
	}
}
