package cgroup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScopeLockOwnership: a scope's lock tells a live owner from a dead
// one. While the owner holds it, a sweeper cannot take it (a live
// sibling's scope); once the owner is gone (its process killed: here the
// lock is held by a flock(1) process that is killed), the sweeper takes
// it; a removed lock file is not taken.
func TestScopeLockOwnership(t *testing.T) {
	dir := t.TempDir()
	const unit = "soda-sandbox-a.scope"
	path := filepath.Join(dir, unit+lockSuffix)

	owner, err := acquireScopeLock(t.Context(), dir, unit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tryLock(path, false); !errors.Is(err, errLockHeld) {
		t.Fatalf("sweeper took a live owner's lock: %v", err)
	}
	owner.release(true)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released lock file still there: %v", err)
	}
	if _, err := tryLock(path, false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sweeper on a removed lock: %v, want not exist", err)
	}

	// An owner in another process, killed with SIGKILL.
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skipf("flock(1) not installed: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", "-x", "-o", path, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := tryLock(path, false)
		if errors.Is(err, errLockHeld) {
			break
		}
		if err == nil {
			l.release(false)
		}
		if time.Now().After(deadline) {
			t.Fatalf("flock(1) never took the lock: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = holder.Process.Kill()
	_ = holder.Wait()
	l, err := tryLock(path, false)
	if err != nil {
		t.Fatalf("sweeper could not take a dead owner's lock: %v", err)
	}
	l.release(true)
}

// TestAcquireScopeLockWaits: an owner waits while a sweeper holds the lock
// of its unit name (it is stopping a leftover of that name), proceeds once
// the sweeper is done, and gives up with an error naming the unit when its
// context ends first.
func TestAcquireScopeLockWaits(t *testing.T) {
	dir := t.TempDir()
	const unit = "soda-sandbox-b.scope"
	sweeper, err := acquireScopeLock(t.Context(), dir, unit)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := acquireScopeLock(ctx, dir, unit); err == nil || !strings.Contains(err.Error(), unit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire a held lock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := acquireScopeLock(t.Context(), dir, unit)
		if err == nil {
			l.release(true)
		}
		got <- err
	}()
	time.Sleep(3 * lockPoll)
	sweeper.release(true) // the sweeper removes the file, then unlocks
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("owner after the sweeper: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("owner still waiting after the sweeper released the lock")
	}
}

// TestLockedUnits lists the lock files of one prefix's scopes only.
func TestLockedUnits(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"soda-sandbox-a.scope.lock", "soda-sandbox-b.scope.lock", "soda-mcp-x-1.scope.lock", "soda-sandbox-c.scope", "soda-sandbox-d.service.lock"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := lockedUnits(dir, "soda-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"soda-sandbox-a.scope", "soda-sandbox-b.scope"}; !slices.Equal(got, want) {
		t.Errorf("lockedUnits = %v, want %v", got, want)
	}
	if got, err := lockedUnits(filepath.Join(dir, "none"), "soda-"); err != nil || got != nil {
		t.Errorf("missing dir: %v %v", got, err)
	}
}

// TestDefaultLockDir: root's system scopes' locks are in /run/soda/scopes;
// other placers' in the user's runtime directory, or nowhere.
func TestDefaultLockDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
	if got := defaultLockDir(true); got != "/run/user/1234/soda/scopes" {
		t.Errorf("user manager: %q", got)
	}
	if os.Geteuid() == 0 {
		if got := defaultLockDir(false); got != "/run/soda/scopes" {
			t.Errorf("root, system manager: %q", got)
		}
	} else if got := defaultLockDir(false); got != "/run/user/1234/soda/system-scopes" {
		t.Errorf("user, system manager: %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := defaultLockDir(true); got != "" {
		t.Errorf("user manager without a runtime directory: %q", got)
	}
}
