package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sandboxProcs lists the processes of sb's PID namespace as the host sees
// them ("pid argv"), init (sb.pid) left out.
func sandboxProcs(t *testing.T, sb *Sandbox) []string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(sb.pid) + "/ns/pid")
	if err != nil {
		t.Fatalf("init's PID namespace: %v", err)
	}
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sb.pid {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		state := ""
		if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) {
			state = string(st[i+2])
		}
		out = append(out, e.Name()+" "+state+" "+strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return out
}

// withoutGuard drops the repository guard from procs.
func withoutGuard(procs []string) (rest []string, guard bool) {
	for _, p := range procs {
		if strings.Contains(p, "soda-sandbox-guard") {
			guard = true
			continue
		}
		rest = append(rest, p)
	}
	return rest, guard
}

// fileSize is the size of path, -1 when it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// TestExecEndOthers: with EndOthers, what a command leaves behind in every
// way a hostile command can (a background job, setsid, a double fork,
// nohup, a process that ignores SIGTERM, a fork loop) is dead when Exec
// returns: no process but init and the repository guard is left in the
// sandbox, and the workspace does not change afterwards. Each leftover
// appends to a file of the workspace every 20 ms and the command returns
// only once it has written: the control (the same command without
// EndOthers) shows the file still growing after Exec returned.
func TestExecEndOthers(t *testing.T) {
	requireNamespaces(t)
	if os.Getuid() != 0 {
		t.Skip("host lacks: the sandbox's processes are read from the host's /proc as root")
	}
	// The fork loop runs only under an enforced task limit.
	limited := false
	t.Run("cgroup1", func(t *testing.T) {
		defer func() { limited = !t.Skipped() }()
		requireCgroup1(t)
	})
	// writer appends to f every 20 ms, forever; wait returns once f
	// has something.
	const writer = `while :; do echo x >> "$F"; sleep 0.02; done`
	const wait = "\nwhile [ ! -s \"$F\" ]; do sleep 0.01; done"
	tests := []struct {
		name   string
		script string
		bomb   bool
	}{
		{"background", `(` + writer + `) &` + wait, false},
		{"setsid", `setsid sh -c '` + writer + `' &` + wait, false},
		{"double fork", `sh -c '(sh -c '"'"'` + writer + `'"'"' &) &'` + wait, false},
		{"setsid double fork", `setsid sh -c 'setsid sh -c '"'"'` + writer + `'"'"' & exit 0' &` + wait, false},
		{"nohup", `nohup sh -c '` + writer + `' >/dev/null 2>&1 &` + wait, false},
		{"ignores SIGTERM and SIGHUP", `sh -c 'trap "" TERM HUP INT; ` + writer + `' &` + wait, false},
		// Its main thread exits, another thread writes on: /proc shows
		// the process as a zombie (Z) while it runs.
		{"main thread exited", `python3 -c '
import os, threading, time, ctypes
def w():
    while True:
        with open(os.environ["F"], "a") as f: f.write("x\n")
        time.sleep(0.02)
threading.Thread(target=w).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall(60, 0)' &` + wait + "\nsleep 0.5", false},
		// Every process of the loop forks on, and retries when the task
		// limit refuses; the writer forks nothing (a shell that cannot
		// fork exits).
		{"fork loop", `setsid perl -e 'while (1) { open(my $f, ">>", $ENV{F}) or die; print $f "x\n"; close $f; select(undef, undef, undef, 0.02) }' &` + wait +
			"\nsetsid perl -e 'while (1) { defined(fork()) or select(undef, undef, undef, 0.005) }' &" +
			"\nexec perl -e 'select(undef, undef, undef, 0.3)'", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bomb && !limited {
				t.Skip("host lacks: no enforced task limit here (cgroup v1 pids as root): a fork loop would reach the host's")
			}
			for _, end := range []bool{false, true} {
				sb, ws := liveSandbox(t, tt.bomb, func(s *Spec) {
					if tt.bomb {
						s.Limits.TasksMax = 256
					}
				})
				f := filepath.Join(ws, "a.txt")
				t0 := time.Now()
				st, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", tt.script}, Env: []string{"F=" + f}, EndOthers: end, Timeout: 20 * time.Second})
				took := time.Since(t0)
				if err != nil || st.Code != 0 || st.TimedOut {
					t.Fatalf("EndOthers=%v: exec %+v %v", end, st, err)
				}
				left, guard := withoutGuard(sandboxProcs(t, sb))
				s0 := fileSize(f)
				time.Sleep(300 * time.Millisecond)
				s1 := fileSize(f)
				if !end {
					// The control: the leftover runs on and writes.
					if s0 <= 0 || s1 <= s0 || len(left) == 0 {
						_, ierr := os.Stat("/proc/" + strconv.Itoa(sb.pid))
						t.Fatalf("control (no EndOthers): file %d then %d bytes, %d processes left (init: %v); want a leftover that writes on", s0, s1, len(left), ierr)
					}
					_ = sb.Close(context.Background())
					continue
				}
				if len(left) > 0 {
					n := len(left)
					t.Errorf("EndOthers: %d processes left in the sandbox when Exec returned, e.g. %v", n, left[:min(n, 5)])
				}
				if s0 <= 0 || s1 != s0 {
					t.Errorf("EndOthers: the workspace file was %d bytes when Exec returned, %d 300 ms later; want it written, then unchanged", s0, s1)
				}
				t.Logf("EndOthers exec took %s", took.Round(time.Millisecond))
				if took > 10*time.Second {
					t.Errorf("EndOthers exec took %s", took)
				}
				// Init and the guard (the workspace is a read-write
				// grant) are alive and the sandbox runs commands.
				if !guard {
					t.Error("the repository guard is gone")
				}
				if st, out, err := execOut(t, sb, nil, 0, "/bin/echo", "alive"); err != nil || st.Code != 0 || out != "alive\n" {
					t.Errorf("exec after EndOthers: %+v %v %q", st, err, out)
				}
			}
		})
	}
}

// procsRunning lists the live processes whose command line is cmd.
func procsRunning(cmd string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == cmd {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestExecEndOthersSparesRunningCommands: a command that ends with
// EndOthers while another runs ends what it left, and what the other
// started in a session of its own (setsid), but not the other command nor
// its own background job, which finish and report as usual.
func TestExecEndOthersSparesRunningCommands(t *testing.T) {
	requireNamespaces(t)
	if os.Getuid() != 0 {
		t.Skip("host lacks: the sandbox's processes are read from the host's /proc as root")
	}
	sb, ws := liveSandbox(t, false, nil)
	// The other command: a background job of its own (kept) and a setsid
	// one (ended), then it waits for a line on its stdin.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	other := `sleep 987.25 >/dev/null & setsid sleep 987.5 >/dev/null & echo started > "$W/other"; read line; echo "$line"`
	var wg sync.WaitGroup
	var ost ExitStatus
	var oout string
	var oerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer inR.Close()
		r, w, _ := os.Pipe()
		done := make(chan string)
		go func() { var b bytes.Buffer; _, _ = b.ReadFrom(r); done <- b.String() }()
		ost, oerr = sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", other}, Env: []string{"W=" + ws}, Stdin: inR, Stdout: w})
		w.Close()
		oout = <-done
	}()
	for deadline := time.Now().Add(5 * time.Second); fileSize(filepath.Join(ws, "other")) <= 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other command did not start")
		}
	}
	// Both background jobs: "started" is written once they are forked, not
	// once each has executed sleep.
	for deadline := time.Now().Add(2 * time.Second); (len(procsRunning("sleep 987.25")) == 0 || len(procsRunning("sleep 987.5")) == 0) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procsRunning("sleep 987.25")) == 0 || len(procsRunning("sleep 987.5")) == 0 {
		t.Fatal("control: the other command's background sleeps are not running")
	}
	st, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", "setsid sleep 987.75 >/dev/null & sleep 987.875 >/dev/null & exit 4"}, EndOthers: true})
	if err != nil || st.Code != 4 {
		t.Fatalf("EndOthers exec: %+v %v", st, err)
	}
	if p := procsRunning("sleep 987.75"); len(p) > 0 {
		t.Errorf("the EndOthers command's setsid leftover survived: %v", p)
	}
	if p := procsRunning("sleep 987.875"); len(p) > 0 {
		t.Errorf("the EndOthers command's background leftover survived: %v", p)
	}
	if p := procsRunning("sleep 987.5"); len(p) > 0 {
		t.Errorf("the other command's setsid process survived: %v", p)
	}
	if len(procsRunning("sleep 987.25")) == 0 {
		t.Error("the other command's own background job was killed")
	}
	_, _ = inW.WriteString("finished\n")
	inW.Close()
	wg.Wait()
	if oerr != nil || ost.Code != 0 || oout != "finished\n" {
		t.Errorf("the other command: %+v %v, out %q; want 0, finished", ost, oerr, oout)
	}
}

// TestExecEndOthersAtTimeout: a command killed at its timeout with
// EndOthers leaves nothing either, a setsid process included (the
// timeout alone kills only its process group).
func TestExecEndOthersAtTimeout(t *testing.T) {
	requireNamespaces(t)
	sb, _ := liveSandbox(t, false, nil)
	for _, end := range []bool{false, true} {
		st, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", "setsid sleep 986.5 >/dev/null & sleep 986.25"}, EndOthers: end, Timeout: 300 * time.Millisecond})
		if err != nil || !st.TimedOut {
			t.Fatalf("EndOthers=%v: %+v %v; want TimedOut", end, st, err)
		}
		left := procsRunning("sleep 986.5")
		switch {
		case !end && len(left) == 0:
			t.Fatal("control: without EndOthers the setsid sleep should outlive the timeout")
		case end && len(left) > 0:
			t.Errorf("EndOthers at the timeout: left %v", left)
		}
	}
}

// TestExecWorkspaceFull: the workspace-full flag comes from the
// filesystem: a fill with its errors silenced sets it, so does running
// out of inodes and a fill removed again within the command (when a
// sample saw it: it lasts 300 ms, three sampling intervals); printing
// the message of ENOSPC does not, nor does half a workspace.
func TestExecWorkspaceFull(t *testing.T) {
	requireNamespaces(t)
	sb, _ := liveSandbox(t, false, func(s *Spec) { s.WorkspaceSize = 8 << 20 })
	tests := []struct {
		name   string
		script string
		want   bool
	}{
		{"half the workspace", `dd if=/dev/zero of=/workspace/half bs=1M count=4 2>/dev/null`, false},
		{"the message only", `echo "dd: error writing '/workspace/big': No space left on device" >&2; echo No space left on device`, false},
		{"filled, errors silenced", `dd if=/dev/zero of=/workspace/big bs=1M count=64 >/dev/null 2>&1; exit 0`, true},
		{"out of inodes", `i=0; while true 2>/dev/null > /workspace/f$i; do i=$((i+1)); done; exit 0`, true},
		{"filled and removed", `dd if=/dev/zero of=/workspace/big bs=1M count=64 >/dev/null 2>&1; sleep 0.3; rm -f /workspace/big`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			r, w, _ := os.Pipe()
			done := make(chan struct{})
			go func() { _, _ = stderr.ReadFrom(r); close(done) }()
			st, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", tt.script}, Stderr: w})
			w.Close()
			<-done
			if err != nil || st.Code != 0 {
				t.Fatalf("exec: %+v %v (stderr %q)", st, err, stderr.String())
			}
			if st.WorkspaceFull != tt.want {
				t.Errorf("WorkspaceFull = %v, want %v (stderr %q)", st.WorkspaceFull, tt.want, stderr.String())
			}
			// Empty the workspace for the next case.
			if st, err := sb.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/sh", "-c", "rm -rf /workspace/* && df -i /workspace >/dev/null"}}); err != nil || st.Code != 0 {
				t.Fatalf("clean the workspace: %+v %v", st, err)
			}
		})
	}
}
