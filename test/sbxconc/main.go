// Command sbxconc starts many sandboxes at once from one process through
// one sandbox engine, as a long-lived daemon would, for the concurrency
// tests of test/sandbox. Run as root where systemd is PID 1.
//
//	sbxconc N HOLD   N sandboxes at once, sandbox i with MemoryMax 100+i MiB
//	                 and TasksMax 50+i, each printing the limits it reads
//	                 from its cgroup and sleeping HOLD seconds; one line
//	                 "i exit=CODE mem=BYTES pids=N" each, then wall_ms=MS
//	sbxconc short-long  a long sandbox (sleep 4), then a short one (true)
//	                 once the long one runs: "short=CODE" and "long=CODE"
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/sandbox"
)

func main() {
	if child.IsGate() {
		child.RunGate()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ecfg := sandbox.Detect()
	ecfg.Log = log
	var err error
	ecfg.InitPath, err = sandbox.FindInit()
	var engine *sandbox.Linux
	if err == nil {
		engine, err = sandbox.New(ecfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbxconc:", err)
		os.Exit(1)
	}
	defer engine.Close()
	if len(os.Args) == 2 && os.Args[1] == "short-long" {
		os.Exit(shortLong(engine))
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sbxconc N HOLD | sbxconc short-long")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(many(engine, n, os.Args[2]))
}

const limitsScript = "echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max) pids=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max); sleep "

// run runs one sandbox to its end and returns its exit code and output.
func run(ctx context.Context, e *sandbox.Linux, argv []string, limits sandbox.Limits, started chan<- struct{}) (int, string, error) {
	home, err := os.MkdirTemp("", "sbxconc-home-")
	if err != nil {
		return -1, "", err
	}
	defer os.RemoveAll(home)
	r, w, err := os.Pipe()
	if err != nil {
		return -1, "", err
	}
	defer r.Close()
	out := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	spec := sandbox.Spec{Argv: argv, Home: home, Limits: limits, Stdout: w, Stderr: w}
	sb, err := e.Start(ctx, spec)
	w.Close()
	if err != nil {
		<-out
		return -1, "", err
	}
	if started != nil {
		close(started)
	}
	st, err := sb.Wait(ctx)
	return st.Code, strings.TrimSpace(<-out), err
}

func many(e *sandbox.Linux, n int, hold string) int {
	ctx := context.Background()
	lines := make([]string, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limits := sandbox.Limits{MemoryMax: int64(100+i) << 20, TasksMax: int64(50 + i)}
			code, out, err := run(ctx, e, []string{"sh", "-c", limitsScript + hold}, limits, nil)
			var b bytes.Buffer
			fmt.Fprintf(&b, "%d exit=%d %s", i, code, out)
			if err != nil {
				fmt.Fprintf(&b, "\n%d error: %v", i, err)
			}
			lines[i] = b.String()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("wall_ms=%d\n", wall.Milliseconds())
	return 0
}

func shortLong(e *sandbox.Linux) int {
	ctx := context.Background()
	up := make(chan struct{})
	long := make(chan string, 1)
	go func() {
		code, out, err := run(ctx, e, []string{"sh", "-c", "sleep 4; echo long-done"}, sandbox.Limits{MemoryMax: 200 << 20, TasksMax: 60}, up)
		long <- fmt.Sprintf("long=%d\n%s\nlong error: %v", code, out, err)
	}()
	<-up
	code, _, err := run(ctx, e, []string{"true"}, sandbox.Limits{}, nil)
	fmt.Printf("short=%d\nshort error: %v\n", code, err)
	fmt.Println(<-long)
	return 0
}
