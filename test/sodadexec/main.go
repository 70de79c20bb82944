// Command sodadexec is a test client of sodad's Exec (test/e2e TestSodad):
// it creates a persistent sandbox from a profile through
// io.github.soda_project.Soda1 and checks, through ExecEx (sodadclient's
// ExecWith), that a command run with end_others leaves nothing behind
// however it tries (a background job, setsid, a double fork, nohup, a
// process that ignores SIGTERM, a fork loop): no process but init is left
// in the sandbox and the workspace stops changing when the call returns,
// while the same command without end_others (the control) leaves a writer
// behind; and that workspace_full comes from the filesystem (a silenced
// fill sets it, echoing the ENOSPC message does not); and that a call
// whose context ends kills its command before it returns. It prints one line
// per check, "ok NAME …" or "FAIL NAME …", then "ok all" or exits 1.
//
//	sodadexec [-profile NAME]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/soda-project/soda/internal/sodadclient"
)

func main() { os.Exit(run()) }

// writer appends to /workspace/a.txt every 20 ms without forking (a shell
// that cannot fork, in the fork loop, exits); wait returns once it wrote.
const (
	writer = `perl -e 'while (1) { open(my $f, ">>", "/workspace/a.txt") or die; print $f "x\n"; close $f; select(undef, undef, undef, 0.02) }'`
	wait   = "\nwhile [ ! -s /workspace/a.txt ]; do sleep 0.01; done"
	// others lists the sandbox's processes but init and the listing
	// shell itself, with builtins only (nothing forked shows up).
	others = `for p in /proc/[0-9]*; do i=${p#/proc/}; [ "$i" = 1 ] || [ "$i" = $$ ] || { read -r c < "$p/comm" && echo "$i $c"; }; done`
)

func run() int {
	profile := flag.String("profile", "dev", "the profile of the sandbox")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sodadclient.Connect(ctx)
	if err != nil {
		fmt.Println("FAIL connect", err)
		return 1
	}
	defer c.Close()
	sb, err := c.Create(ctx, sodadclient.Request{Profile: *profile, Spec: sodadclient.Spec{Persistent: true, WorkspaceSize: 8 << 20, TasksMax: 128}})
	if err != nil {
		fmt.Println("FAIL create", err)
		return 1
	}
	defer removeSandbox(sb)
	k := &checker{sb: sb}
	k.checkExec(ctx)
	k.checkEndOthers(ctx)
	k.checkWorkspaceFull(ctx)
	k.checkCancel(ctx)
	if k.failed {
		return 1
	}
	fmt.Println("ok all")
	return 0
}

// removeSandbox kills sb and waits for it before closing it.
func removeSandbox(sb *sodadclient.Sandbox) {
	// Ended before the next step of the caller (sodad's per-user
	// count).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Kill(ctx, 9, false); err == nil {
		_, _ = sb.Wait(ctx)
	}
	sb.Close()
}

// checker runs the checks in one sandbox and remembers whether one failed.
type checker struct {
	sb     *sodadclient.Sandbox
	failed bool
}

// fail prints the FAIL line of the check name and marks the run failed.
func (k *checker) fail(name string, f string, a ...any) {
	k.failed = true
	fmt.Printf("FAIL %s: %s\n", name, fmt.Sprintf(f, a...))
}

// sh runs script with o and returns its status and stdout.
func (k *checker) sh(ctx context.Context, script string, o sodadclient.ExecOptions) (sodadclient.ExecStatus, string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return sodadclient.ExecStatus{}, "", err
	}
	done := make(chan string)
	go func() { var b bytes.Buffer; _, _ = b.ReadFrom(r); r.Close(); done <- b.String() }()
	o.Timeout = 30 * time.Second
	st, err := k.sb.ExecWith(ctx, []string{"/bin/sh", "-c", script}, o, sodadclient.Stdio{Stdout: w})
	w.Close()
	// A leftover holding stdout keeps it open: read what came within
	// a second.
	select {
	case out := <-done:
		return st, out, err
	case <-time.After(time.Second):
		return st, "", err
	}
}

// size is the size of /workspace/a.txt, -1 if there is none, -2 if it
// cannot be read.
func (k *checker) size(ctx context.Context) int {
	_, out, _ := k.sh(ctx, "stat -c %s /workspace/a.txt 2>/dev/null || echo -1", sodadclient.ExecOptions{})
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return -2
	}
	return n
}

// checkExec checks that the old method still answers.
func (k *checker) checkExec(ctx context.Context) {
	if st, err := k.sb.Exec(ctx, []string{"/bin/sh", "-c", "exit 5"}, "", 0, sodadclient.Stdio{}); err != nil || st.Code != 5 {
		k.fail("exec", "Exec: %+v %v, want 5", st, err)
	} else {
		fmt.Println("ok exec (the old method)")
	}
}

// checkEndOthers checks that a command run with end_others leaves nothing
// behind however it tries, after a control run without it that does.
func (k *checker) checkEndOthers(ctx context.Context) {
	cases := []struct{ name, script string }{
		{"background", `(` + writer + `) &` + wait},
		{"setsid", `setsid ` + writer + ` &` + wait},
		{"double-fork", `sh -c '(` + strings.ReplaceAll(writer, `'`, `'"'"'`) + ` &) &'` + wait},
		{"nohup", `nohup ` + writer + ` >/dev/null 2>&1 &` + wait},
		{"ignores-sigterm", `sh -c 'trap "" TERM HUP INT; exec ` + strings.ReplaceAll(writer, `'`, `'"'"'`) + `' &` + wait},
		{"fork-loop", `setsid ` + writer + ` &` + wait +
			"\nsetsid perl -e 'while (1) { defined(fork()) or select(undef, undef, undef, 0.005) }' &" +
			"\nexec perl -e 'select(undef, undef, undef, 0.3)'"},
	}
	for i, tc := range cases {
		ends := []bool{true}
		if i == 0 {
			ends = []bool{false, true} // the control first
		}
		for _, end := range ends {
			k.checkLeftovers(ctx, tc.name, tc.script, end)
		}
	}
}

// checkLeftovers runs script in a clean workspace, with end_others if end,
// and checks what it left: nothing with end_others, a writer without.
func (k *checker) checkLeftovers(ctx context.Context, name, script string, end bool) {
	if !end {
		name += "-control"
	}
	if st, _, err := k.sh(ctx, "rm -f /workspace/a.txt", sodadclient.ExecOptions{EndOthers: true}); err != nil || st.Code != 0 {
		k.fail(name, "clean up: %+v %v", st, err)
		return
	}
	t0 := time.Now()
	st, _, err := k.sh(ctx, script, sodadclient.ExecOptions{EndOthers: end})
	took := time.Since(t0)
	if err != nil || st.Code != 0 {
		k.fail(name, "exec: %+v %v", st, err)
		return
	}
	_, left, _ := k.sh(ctx, others, sodadclient.ExecOptions{})
	s0 := k.size(ctx)
	time.Sleep(300 * time.Millisecond)
	s1 := k.size(ctx)
	left = strings.TrimSpace(left)
	switch {
	case !end && (s0 <= 0 || s1 <= s0 || left == ""):
		k.fail(name, "without end_others: a.txt %d then %d bytes, left %q; want a writer left behind", s0, s1, left)
	case end && (left != "" || s0 <= 0 || s1 != s0):
		k.fail(name, "with end_others: left %q, a.txt %d then %d bytes; want nothing left, a.txt written, then unchanged", left, s0, s1)
	default:
		fmt.Printf("ok %s end_others=%v took=%s a.txt=%d,%d\n", name, end, took.Round(time.Millisecond), s0, s1)
	}
}

// checkWorkspaceFull checks that workspace_full comes from the
// filesystem: a silenced fill sets it, echoing the ENOSPC message does not.
func (k *checker) checkWorkspaceFull(ctx context.Context) {
	for _, tc := range []struct {
		name, script string
		want         bool
	}{
		{"message-only", `echo "dd: error writing '/workspace/big': No space left on device" >&2`, false},
		{"fill-silenced", `dd if=/dev/zero of=/workspace/big bs=1M count=64 >/dev/null 2>&1; sleep 0.3; rm -f /workspace/big`, true},
	} {
		st, _, err := k.sh(ctx, tc.script, sodadclient.ExecOptions{})
		if err != nil || st.Code != 0 || st.WorkspaceFull != tc.want {
			k.fail("workspace-"+tc.name, "%+v %v, want workspace_full %v", st, err, tc.want)
			continue
		}
		fmt.Printf("ok workspace-%s workspace_full=%v\n", tc.name, st.WorkspaceFull)
	}
}

// checkCancel checks a cancelled call: the command (and, with end_others,
// what it left) is killed, and ExecWith returns only then: nothing of it
// runs on.
func (k *checker) checkCancel(ctx context.Context) {
	if st, _, err := k.sh(ctx, "rm -f /workspace/a.txt", sodadclient.ExecOptions{EndOthers: true}); err != nil || st.Code != 0 {
		k.fail("cancel", "clean up: %+v %v", st, err)
		return
	}
	cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer ccancel()
	t0 := time.Now()
	_, err := k.sb.ExecWith(cctx, []string{"/bin/sh", "-c", "(sleep 2; echo late > /workspace/a.txt) >/dev/null 2>&1 & sleep 2; echo late > /workspace/b.txt"},
		sodadclient.ExecOptions{EndOthers: true, Timeout: 30 * time.Second}, sodadclient.Stdio{})
	took := time.Since(t0)
	time.Sleep(2500 * time.Millisecond)
	_, left, _ := k.sh(ctx, others, sodadclient.ExecOptions{})
	_, files, _ := k.sh(ctx, "ls /workspace", sodadclient.ExecOptions{})
	switch {
	case err == nil:
		k.fail("cancel", "ExecWith returned no error after its context ended")
	case took > 10*time.Second:
		k.fail("cancel", "ExecWith returned %s after its context ended", took)
	case strings.TrimSpace(left) != "" || strings.TrimSpace(files) != "":
		k.fail("cancel", "after a cancelled call: processes %q, files %q; want none", left, files)
	default:
		fmt.Printf("ok cancel took=%s err=%v\n", took.Round(time.Millisecond), err)
	}
}
