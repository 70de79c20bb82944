package main

// The resource subcommands: they push against the cgroup's pids, memory and
// cpu limits and against the sandbox's teardown, and report what they got.

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// positiveArg parses the single positional argument of a subcommand.
func positiveArg(name string, args []string, stderr io.Writer) (float64, bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 0, false
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "sbxprobe %s: need exactly one number\n", name)
		return 0, false
	}
	v, err := strconv.ParseFloat(pos[0], 64)
	if err != nil || v <= 0 {
		fmt.Fprintf(stderr, "sbxprobe %s: bad number %q\n", name, pos[0])
		return 0, false
	}
	return v, true
}

// forkbombReport is printed by "sbxprobe forkbomb".
type forkbombReport struct {
	Started int    `json:"started"`
	Error   string `json:"error"`
	Errno   string `json:"errno,omitempty"`
}

// cmdForkbomb starts up to N "sleep 30" children, stops at the first
// failure, prints {"started":k,"error":"..."} and kills the children. It
// runs on one P so that the runtime needs no new threads once the pids
// limit is reached.
func cmdForkbomb(args []string, stdout, stderr io.Writer) int {
	v, ok := positiveArg("forkbomb", args, stderr)
	if !ok {
		return 2
	}
	runtime.GOMAXPROCS(1)
	n := int(v)
	var pids []int
	var ferr error
	for len(pids) < n {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "30"}, &syscall.ProcAttr{})
		if err != nil {
			ferr = err
			break
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	r := forkbombReport{Started: len(pids)}
	if ferr != nil {
		r.Error, r.Errno = ferr.Error(), errnoName(ferr)
	}
	return writeJSON(stdout, r)
}

// memhogChunk is how much memhog maps at a time.
const memhogChunk = 16 << 20

// cmdMemhog maps MB MiB of anonymous memory outside the Go heap, touches
// every page, reports progress on stderr and prints {"allocated_mb":N}.
func cmdMemhog(args []string, stdout, stderr io.Writer) int {
	v, ok := positiveArg("memhog", args, stderr)
	if !ok {
		return 2
	}
	want := int(v) << 20
	page := os.Getpagesize()
	var maps [][]byte
	done := 0
	for done < want {
		size := min(memhogChunk, want-done)
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return writeJSON(stdout, map[string]any{"allocated_mb": done >> 20, "error": err.Error()})
		}
		for i := 0; i < size; i += page {
			mem[i] = 1
		}
		maps = append(maps, mem)
		done += size
		fmt.Fprintf(stderr, "memhog: %d MiB touched\n", done>>20)
	}
	code := writeJSON(stdout, map[string]int{"allocated_mb": done >> 20})
	for _, m := range maps {
		unix.Munmap(m)
	}
	return code
}

// orphanInner is the hidden subcommand run by orphan's first fork.
const orphanInner = "orphan-inner"

// cmdOrphan double-forks a setsid "sleep 1000" that is not waited for,
// prints {"daemon_pid":N} and returns at once.
func cmdOrphan(args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "sbxprobe orphan: takes no arguments")
		return 2
	}
	cmd := exec.Command("/proc/self/exe", orphanInner)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return writeJSON(stdout, map[string]any{"daemon_pid": 0, "error": err.Error()})
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return writeJSON(stdout, map[string]any{"daemon_pid": 0, "error": "bad pid from " + orphanInner})
	}
	return writeJSON(stdout, map[string]int{"daemon_pid": pid})
}

// cmdOrphanInner starts the daemon in a new session with its standard
// streams on /dev/null, prints its pid and exits without waiting.
func cmdOrphanInner(stdout io.Writer) int {
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "sbxprobe orphan:", err)
		return 1
	}
	fmt.Fprintln(stdout, cmd.Process.Pid)
	return 0
}

// cpuReport is printed by "sbxprobe cpuburn".
type cpuReport struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
}

// cpuSink keeps the busy loops from being optimised away.
var cpuSink atomic.Uint64

// cmdCPUBurn spins two threads for SECONDS and prints the CPU time used
// (getrusage) next to the wall time. GOMAXPROCS is raised to 2 because the
// runtime would otherwise size it from the cgroup's CPU quota.
func cmdCPUBurn(args []string, stdout, stderr io.Writer) int {
	v, ok := positiveArg("cpuburn", args, stderr)
	if !ok {
		return 2
	}
	runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	dur := time.Duration(v * float64(time.Second))
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			var x uint64
			for time.Since(start) < dur {
				for i := 0; i < 100000; i++ {
					x += uint64(i) ^ x>>3
				}
			}
			cpuSink.Add(x)
		}()
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(stderr, "sbxprobe cpuburn: getrusage:", err)
		return 1
	}
	cpu := tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
	return writeJSON(stdout, cpuReport{CPUSeconds: cpu, WallSeconds: wall})
}

// tvSeconds converts a Timeval to seconds.
func tvSeconds(tv unix.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
