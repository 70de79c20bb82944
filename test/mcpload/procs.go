package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// procs tracks the process groups we spawned so that an interrupt (SIGINT,
// SIGTERM, SIGHUP) stops them before we exit: nothing is left running.
var procs = struct {
	sync.Mutex
	groups map[int]chan struct{} // leader pid -> closed when reaped (may be nil)
}{groups: map[int]chan struct{}{}}

// trackGroup registers the process group led by pid; done (optional) is
// closed once the leader has been reaped.
func trackGroup(pid int, done chan struct{}) {
	procs.Lock()
	procs.groups[pid] = done
	procs.Unlock()
}

// untrackGroup forgets the group led by pid.
func untrackGroup(pid int) {
	procs.Lock()
	delete(procs.groups, pid)
	procs.Unlock()
}

// stopOnSignal installs the interrupt handler.
func stopOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ch
		procs.Lock()
		groups := procs.groups
		procs.groups = map[int]chan struct{}{}
		procs.Unlock()
		// SIGTERM first: a bridge cleans up children that live outside its
		// process group (cgroups, detached children) when it is asked nicely.
		for pid := range groups {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		deadline := time.After(3 * time.Second)
	wait:
		for _, done := range groups {
			if done == nil {
				continue
			}
			select {
			case <-done:
			case <-deadline:
				break wait
			}
		}
		for pid := range groups {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		os.Exit(130)
	}()
}
