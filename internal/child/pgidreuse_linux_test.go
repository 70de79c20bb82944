package child

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestRecoverSparesReusedPgid: a record's process group is gone and its
// pid number now leads an unrelated process group (pid_max is 32768 on
// machines of this kind: reuse is quick). Recovery must not take the new
// group for the old one's survivors and kill it.
func TestRecoverSparesReusedPgid(t *testing.T) {
	victim := exec.Command("sleep", "30")
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // leads its own group, as a sandbox's command does
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	st, err := readProcStat(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The record of a child whose group had the same number, started
	// earlier: its leader is gone, so the start times differ.
	r := ledgerRecord{ID: "reused", Group: "pgid", Pgid: victim.Process.Pid, Pid: victim.Process.Pid, PidStart: st.startTime - 1}
	n, err := recoverRecord(context.Background(), r, nil)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n != 0 || syscall.Kill(victim.Process.Pid, 0) != nil {
		t.Fatalf("recovery killed %d processes of an unrelated group that reuses the recorded pgid", n)
	}
}
