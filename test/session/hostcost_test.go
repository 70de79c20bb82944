package session

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The attacks of issue 23 §1 ("host-side work is unbounded"): what the
// server does on the host for a sandbox (outside its cgroup) is bounded
// in memory, CPU and time, whatever the agent made in its workspace. Each
// measures the server process itself: its peak resident memory (VmHWM)
// and its CPU time (utime + stime).

// hostCost is the server's peak memory and CPU time so far.
type hostCost struct {
	hwmKiB int64
	cpu    time.Duration
}

func costOf(t *testing.T, pid int) hostCost {
	t.Helper()
	var c hostCost
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			c.hwmKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	f.Close()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line, in clock ticks (100 Hz).
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(rest[11], 10, 64)
	st, _ := strconv.ParseInt(rest[12], 10, 64)
	c.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	return c
}

// growth is what the server cost between two readings: peak memory grown
// in MiB, CPU time spent.
func growth(a, b hostCost) (int64, time.Duration) { return (b.hwmKiB - a.hwmKiB) >> 10, b.cpu - a.cpu }

// TestReadFilesBounded: the attack read an 8 MiB file 40 times
// (and through 40 hard links): about 16 times host memory per byte read,
// OOM-killing a server capped at 3 GiB. A repeated path is refused now,
// and one call returns at most 4 MiB of contents, whatever the links.
func TestReadFilesBounded(t *testing.T) {
	cs, _ := server(t)
	pid := serverPID(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "head -c 8388608 /dev/urandom > big && for i in $(seq 40); do ln big l$i; done && head -c 3000000 /dev/urandom > mid && ln mid mid2"})
	before := costOf(t, pid)
	repeated := make([]any, 40)
	for i := range repeated {
		repeated[i] = "big"
	}
	if _, err, _ := callRaw(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": repeated}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("40 times the same path: %v, want it refused", err)
	}
	links := []any{"big"}
	for i := 1; i <= 40; i++ {
		links = append(links, fmt.Sprintf("l%d", i))
	}
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": links})
	for _, f := range r.Files {
		if f.Content != "" || !f.Exists {
			t.Errorf("%s: %d bytes of contents returned past the 4 MiB a call returns", f.Path, len(f.Content))
			break
		}
	}
	// Under the bound: the first of two hard links, not the second.
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"mid", "mid2"}, "encoding": "base64"})
	if len(r.Files) != 2 || r.Files[0].Content == "" || r.Files[1].Content != "" {
		t.Errorf("two hard links of 3 MB: contents returned %d and %d bytes, want the first only", len(r.Files[0].Content), len(r.Files[1].Content))
	}
	mem, cpu := growth(before, costOf(t, pid))
	t.Logf("read_files of an 8 MiB file through 41 names and a 3 MB one through 2: the server's peak memory grew %d MiB, %s of CPU", mem, cpu)
	if mem > 150 {
		t.Errorf("the server's peak memory grew %d MiB", mem)
	}
}

// TestIsolatedSeedBounded: an isolated run seeded from 8 MiB plus 500 hard
// links of it expanded the links into full copies in one buffer (4 GiB:
// OOM). The seed streams from the parent's tar into the child's now,
// links kept as links.
func TestIsolatedSeedBounded(t *testing.T) {
	cs, _ := server(t)
	pid := serverPID(t)
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("s.sh", "ls d | wc -l; stat -c %h d/big\n")}})
	id := r.SandboxID
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "mkdir d && head -c 8388608 /dev/urandom > d/big && for i in $(seq 500); do ln d/big d/l$i; done"})
	before := costOf(t, pid)
	r, _ = must(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "s.sh", "isolated": true, "seed_paths": []any{"d", "s.sh"}, "diff": "json"})
	mem, cpu := growth(before, costOf(t, pid))
	t.Logf("isolated run seeded with an 8 MiB file and 500 hard links of it: the server's peak memory grew %d MiB, %s of CPU", mem, cpu)
	if r.Exec == nil || r.Exec.Stdout != "501\n501\n" {
		t.Errorf("the child saw %+v, want 501 names of one file with 501 links", r.Exec)
	}
	if r.ChildDiff == nil || len(r.ChildDiff.Changes) != 0 {
		t.Errorf("the child's diff: %+v", r.ChildDiff)
	}
	if mem > 150 {
		t.Errorf("the server's peak memory grew %d MiB", mem)
	}
}

// TestDiffBoundedHost: a unified diff of long files of repeated lines
// (16k lines took 67 s of the server's CPU, a 1 MB file hours) and a diff
// of many empty directories (quadratic: 20k took 18 s, 60k 372 s) cost
// the server seconds at most now.
func TestDiffBoundedHost(t *testing.T) {
	cs, _ := server(t)
	pid := serverPID(t)
	var x strings.Builder
	for i := range 16000 {
		fmt.Fprintf(&x, "line %d\n", i%7)
	}
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("long.txt", x.String()), file("mb.txt", strings.Repeat("a\n", 500000))}})
	id := r.SandboxID
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "python3 -c \"print(''.join('line %d\\n' % (i % 11) for i in range(16000)), end='')\" > long.txt && python3 -c \"print('b\\n' * 500000, end='')\" > mb.txt && mkdir dirs && cd dirs && seq 20000 | xargs mkdir"})
	before := costOf(t, pid)
	t0 := time.Now()
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id, "format": "unified"})
	took := time.Since(t0)
	_, cpu := growth(before, costOf(t, pid))
	t.Logf("unified diff of a 16000-line file of repeated lines, a 1 MB one and 20000 empty directories: %s, %s of the server's CPU", took, cpu)
	if r.Diff.Summary.Added != 20000 || r.Diff.Summary.Modified != 2 {
		t.Errorf("summary %+v", r.Diff.Summary)
	}
	if !strings.Contains(r.Diff.Unified, "+line 10") {
		t.Errorf("no line diff of long.txt")
	}
	if cpu > 10*time.Second || took > 30*time.Second {
		t.Errorf("the diff cost the server %s of CPU in %s", cpu, took)
	}
}

// TestCloseCancelsCall: sandbox_close of a sandbox whose call runs ends
// that call at once, instead of waiting up to the exec time-out.
func TestCloseCancelsCall(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	var wg sync.WaitGroup
	var execErr string
	wg.Go(func() {
		r, _, _ := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "sleep 100"})
		execErr = r.Error
	})
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": id})
	wg.Wait()
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("sandbox_close during an exec took %s", d)
	}
	if !strings.Contains(execErr, "ended during the call") {
		t.Errorf("the exec ended with %q", execErr)
	}
}

// TestDiffHidesNothing: names that are not portable used to be left out
// of sandbox_diff (a whole tree could hide from the reviewer); a chmod 000
// file diffed as deleted; a chmod 000 directory made sandbox_reset fail
// half-way with the workspace emptied.
func TestDiffHidesNothing(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("keep.txt", "kept\n"), file("locked/inner.txt", "inner\n")}})
	id := r.SandboxID
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": `mkdir -p con && echo x > con/payload.sh && echo y > aux.py && echo z > 'back\slash' && echo n > "$(printf 'new\nline')" && echo b > "$(printf 'bad\377')" && mkdir -p tree/deep && echo s > tree/deep/secret && chmod 000 keep.txt && chmod 000 locked`})
	r, text := must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	got := map[string]string{}
	unaddressable := 0
	for _, c := range r.Diff.Changes {
		got[c.Path] = c.Kind
		if c.Unaddressable != "" {
			unaddressable++
		}
	}
	for p, k := range map[string]string{"con/payload.sh": "added", "aux.py": "added", `back\slash`: "added", "new\nline": "added", "bad\uFFFD": "added", "tree/deep/secret": "added", "keep.txt": "mode", "locked": "mode"} {
		if got[p] != k {
			t.Errorf("%q: %q, want %q", p, got[p], k)
		}
	}
	if unaddressable != 5 {
		t.Errorf("%d changes marked unaddressable, want 5 (con/payload.sh, aux.py, back\\slash, new\\nline, bad\\377): %+v", unaddressable, r.Diff.Changes)
	}
	if !strings.Contains(text, "aux.py") {
		t.Errorf("the text rendering leaves out an unaddressable name:\n%s", text)
	}
	// The modes the agent set are still there after the diff.
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "stat -c '%a %n' keep.txt locked"})
	if r.Exec.Stdout != "0 keep.txt\n0 locked\n" {
		t.Errorf("modes after the diff: %q", r.Exec.Stdout)
	}
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"keep.txt", "locked/inner.txt"}})
	if r.Files[0].Content != "kept\n" || r.Files[1].Content != "inner\n" {
		t.Errorf("read of chmod 000 entries: %+v", r.Files)
	}
	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if len(r.Diff.Changes) != 0 {
		t.Errorf("diff after reset: %+v", r.Diff.Changes)
	}
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "cat keep.txt locked/inner.txt"})
	if r.Exec.Stdout != "kept\ninner\n" {
		t.Errorf("after reset: %q", r.Exec.Stdout)
	}
}

// TestChildrenCounted: isolated children count against --max-sandboxes
// (limit 2, 4 were live before), and a direct child's egress is in its
// session's audit (it was dropped).
func TestChildrenCounted(t *testing.T) {
	cs, _ := server(t, "--max-sandboxes", "2", "--allow", "localhost.invalid:443")
	script := file("probe.sh", "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', 18080)); s.sendall(b'CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n'); print(s.recv(100).split(b' ')[1].decode())\"\n")
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{script}})
	a := r.SandboxID
	r, _, _ = call(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": a, "entry": "probe.sh", "isolated": true, "files": []any{script}})
	if r.Exec == nil || strings.TrimSpace(r.Exec.Stdout) != "403" {
		t.Errorf("the child's CONNECT: %+v", r.Exec)
	}
	audit, _ := must(t, cs, "sandbox_audit", map[string]any{"sandbox_id": a})
	egress := false
	for _, e := range audit.Audit.Records {
		egress = egress || e.Kind == "egress"
	}
	if !egress {
		t.Errorf("the isolated child's denied CONNECT is not in the session's audit")
	}
	must(t, cs, "sandbox_create", nil)
	r, _, isErr := call(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": a, "entry": "probe.sh", "isolated": true, "files": []any{script}})
	if !isErr || !strings.Contains(r.Error, "no room for an isolated child") {
		t.Errorf("an isolated child with 2 of 2 sandboxes live: %+v", r)
	}
}

// TestBadFramesKeepSessions: one bad frame on stdin (non-JSON, a batch,
// an object id, nesting over 1000, a frame over 16 MiB) used to end the
// server and every sandbox; each gets its JSON-RPC error now, and the
// sandbox made before them still answers.
func TestBadFramesKeepSessions(t *testing.T) {
	p := rawServer(t)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`)
	created := p.read()
	id := created.structured()["sandbox_id"]
	if id == nil {
		t.Fatalf("create: %v", created)
	}
	for _, bad := range []struct{ name, frame string }{
		{"not JSON", "}{ not json"},
		{"a batch", "[1,2]"},
		{"an object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`},
		{"nesting over 1000", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`},
		{"over 16 MiB", `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"x":"` + strings.Repeat("a", 17<<20) + `"}}`},
		{"a lone surrogate", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sandbox_write_files","arguments":{"sandbox_id":"x","files":[{"path":"a","content":"\ud800"}]}}}`},
	} {
		p.send(bad.frame)
		if r := p.read(); r["error"] == nil {
			t.Errorf("%s: reply %v, want a JSON-RPC error", bad.name, r)
		}
	}
	p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox_id":%q,"command":"echo alive"}}}`, id))
	if r := p.read(); r.structured()["ok"] != true {
		t.Errorf("the sandbox made before the bad frames: %v", r)
	}
}

// rawPeer is a server spoken to in raw newline-delimited JSON-RPC.
type rawPeer struct {
	t     *testing.T
	in    io.Writer
	lines *bufio.Scanner
}

type rawMsg map[string]any

func (m rawMsg) structured() map[string]any {
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	return sc
}

// rawServer starts sodactl sandbox mcp --direct, initialized.
func rawServer(t *testing.T) *rawPeer {
	t.Helper()
	requireSandbox(t)
	cmd := exec.Command(filepath.Join(bin, "sodactl"), "sandbox", "mcp", "--direct", "--allow-degraded", "cgroup")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	// A reply that never comes fails the test instead of hanging it.
	watchdog := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() { watchdog.Stop() })
	p := &rawPeer{t: t, in: in, lines: bufio.NewScanner(out)}
	p.lines.Buffer(make([]byte, 1<<20), 1<<20)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	p.read()
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

func (p *rawPeer) send(frame string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, frame+"\n"); err != nil {
		p.t.Fatalf("write to the server: %v", err)
	}
}

func (p *rawPeer) read() rawMsg {
	p.t.Helper()
	if !p.lines.Scan() {
		p.t.Fatalf("the server's stdout ended: %v", p.lines.Err())
	}
	var m rawMsg
	if err := json.Unmarshal(p.lines.Bytes(), &m); err != nil {
		p.t.Fatalf("not JSON: %q", p.lines.Text())
	}
	return m
}

// shmemKiB is the host's tmpfs and shared memory (/proc/meminfo Shmem):
// what a sandbox's RAM-backed files pin.
func shmemKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Shmem:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatal("no Shmem in /proc/meminfo")
	return 0
}

// TestIdleSessionPins: everything one session can write in RAM, together,
// pins at most 1 GiB of host memory once its exec returned (the default
// limits). Before, /tmp, /var/tmp and the home were 1 GiB tmpfs each and
// /dev/shm 257 MiB, outside the 512 MiB workspace quota: one session
// pinned 3.8 GiB. The attack fills every writable place, SysV shared
// memory included, and leaves.
func TestIdleSessionPins(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	before := shmemKiB(t)
	fill := `for d in /workspace /tmp /var/tmp /dev/shm "$HOME"; do head -c 4G /dev/zero > "$d/fill" 2>/dev/null; done
python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
libc.shmat.restype = ctypes.c_void_p
for i in range(8):
    sid = libc.shmget(0, ctypes.c_size_t(512 << 20), 0o1600)
    if sid < 0:
        break
    p = libc.shmat(sid, None, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(p, 1, 512 << 20)
' 2>/dev/null
du -sck /workspace /tmp /var/tmp /dev/shm "$HOME" 2>/dev/null | tail -1; true`
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": fill, "timeout_seconds": 120})
	time.Sleep(time.Second)
	pinned := (shmemKiB(t) - before) >> 10
	t.Logf("one idle session after filling its workspace, /tmp, /var/tmp, /dev/shm, its home and SysV shared memory: %d MiB of host memory pinned (du in the sandbox: %s)", pinned, strings.TrimSpace(r.Exec.Stdout))
	if pinned > 1024+64 {
		t.Errorf("one idle session pins %d MiB, want at most 1 GiB", pinned)
	}
	must(t, cs, "sandbox_close", map[string]any{"sandbox_id": id})
	time.Sleep(500 * time.Millisecond)
	if left := (shmemKiB(t) - before) >> 10; left > 64 {
		t.Errorf("%d MiB still pinned after sandbox_close", left)
	}
}

// TestNothingOutlivesTheCall: a process an exec leaves behind used to go
// on after the call: (sleep 2; echo changed > a.txt) & then sandbox_reset
// gave an empty diff, and 3 s later, with no call in between, the
// workspace had changed again. Every process a call started ends with it
// now, however it tried to stay (background, setsid, nohup, a double
// fork, SIGTERM ignored).
func TestNothingOutlivesTheCall(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("a.txt", "base\n")}})
	id := r.SandboxID
	// Their output goes elsewhere, so that the call does not wait for
	// them on its pipes.
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": `(sleep 3; echo changed > a.txt) >/dev/null 2>&1 &
setsid sh -c 'sleep 3; echo setsid > b.txt' >/dev/null 2>&1 &
nohup sh -c 'sleep 3; echo nohup > c.txt' >/dev/null 2>&1 &
sh -c '(trap "" TERM; sleep 3; echo double > d.txt) &' >/dev/null 2>&1 &
echo started`})
	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	time.Sleep(4 * time.Second)
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if len(r.Diff.Changes) != 0 {
		t.Errorf("the workspace changed after the call that started it returned: %+v", r.Diff.Changes)
	}
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "ps -e -o comm= | grep -cv -e '^ps$' -e '^sh$' -e '^grep$' -e soda-sandbox || true"})
	if strings.TrimSpace(r.Exec.Stdout) != "0" {
		t.Errorf("processes left in the sandbox between calls: %q", r.Exec.Stdout)
	}
}

// TestQuotaFromTheFilesystem: quota_hit came from the text "No space left
// on device" in the output: echoing it recorded a quota hit, and a real
// ENOSPC with stderr silenced recorded none.
func TestQuotaFromTheFilesystem(t *testing.T) {
	cs, _ := server(t, "--quota", "8M")
	r, _ := must(t, cs, "sandbox_create", nil)
	id := r.SandboxID
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "echo 'No space left on device' >&2"})
	if r.Exec.QuotaHit {
		t.Errorf("echoing the message recorded a quota hit")
	}
	r, _, _ = call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "head -c 16M /dev/zero > big 2>/dev/null; true"})
	if r.Exec == nil || !r.Exec.QuotaHit {
		t.Errorf("a real ENOSPC with stderr silenced: %+v", r.Exec)
	}
}

// TestSnapshotsHoldUp: what the agent can do to the workspace between
// calls cannot make a diff, a read or a reset fail, hide an entry or
// leave the workspace changed (found by review): a directory chain longer
// than PATH_MAX with a locked directory at its end, a sparse file far
// larger than the workspace, /tmp out of inodes, the workspace itself
// chmod 000, a write over a directory, and an isolated child seeded
// with unreadable files.
func TestSnapshotsHoldUp(t *testing.T) {
	cs, _ := server(t)
	r, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("keep.txt", "kept\n")}})
	id := r.SandboxID
	deep := `bash -c 'd=$(printf "x%.0s" $(seq 200)); for i in $(seq 25); do mkdir "$d" && cd "$d" || exit 1; done; mkdir locked && echo s > locked/secret && chmod 000 locked'`
	fillTmp := `python3 -c 'import itertools
for i in itertools.count():
    try: open("/tmp/f%d" % i, "w").close()
    except OSError: break'`
	r, _ = must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": deep + " && truncate -s 2G sparse && " + fillTmp + " && df -i /tmp | tail -1 && chmod 000 /workspace"})
	t.Logf("/tmp after the fill: %s", strings.TrimSpace(r.Exec.Stdout))
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	var long, sparse bool
	for _, c := range r.Diff.Changes {
		long = long || strings.Contains(c.Unaddressable, "longer than")
		sparse = sparse || c.Path == "sparse"
	}
	if !long || !sparse {
		t.Errorf("diff: the entries past PATH_MAX listed %v, the sparse file %v: %+v", long, sparse, r.Diff.Summary)
	}
	r, _ = must(t, cs, "sandbox_read_files", map[string]any{"sandbox_id": id, "paths": []any{"keep.txt", "sparse"}})
	if r.Files[0].Content != "kept\n" || r.Files[1].Content != "" {
		t.Errorf("read: %+v", r.Files)
	}
	// The workspace is as the agent left it: chmod 000, so that a
	// command cannot even start in it, until a reset.
	if r, _, isErr := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "true"}); !isErr || !strings.Contains(r.Error, "permission denied") {
		t.Errorf("the workspace's mode after a diff and a read is not the agent's 000: %+v", r)
	}
	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "mkdir dir"})
	if _, err, _ := callRaw(t, cs, "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{file("dir", "x")}}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a write over a directory: %v", err)
	}
	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	r, _ = must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if len(r.Diff.Changes) != 0 {
		t.Errorf("diff after reset: %+v", r.Diff.Changes)
	}
	// An isolated child seeded with a file the agent made unreadable: no
	// change it did not make.
	must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "echo s > locked.sh && chmod 000 locked.sh && echo true > run.sh"})
	r, _ = must(t, cs, "sandbox_run_script", map[string]any{"sandbox_id": id, "entry": "run.sh", "isolated": true, "seed_paths": []any{"locked.sh", "run.sh"}, "diff": "json"})
	if r.ChildDiff == nil || len(r.ChildDiff.Changes) != 0 {
		t.Errorf("the child's diff: %+v", r.ChildDiff)
	}
}
