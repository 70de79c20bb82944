// Command sbxbench is the load tool of bench/sandbox.sh: loopback TCP
// servers and clients to measure what sodactl's egress relay costs, and a
// start-up timer for sandboxes. Every result is one JSON line on stdout.
//
//	sbxbench sink ADDR
//	    accept on ADDR (e.g. 127.0.0.1:0); print the port, then for each
//	    connection discard and count until EOF, answer the count (8 bytes,
//	    big-endian) and close.
//	sbxbench echo ADDR
//	    accept on ADDR; print the port, then echo every connection back.
//	sbxbench push [--proxy HOST:PORT] TARGET BYTES
//	    connect to TARGET (through an HTTP CONNECT proxy if given), write
//	    BYTES (e.g. 2GiB) in 256 KiB writes, half-close and wait for the
//	    sink's count: {"bytes","seconds","mbps"} (mbps = 10^6 bit/s).
//	sbxbench connects [--proxy HOST:PORT] TARGET N
//	    N sequential connections to an echo server, each: connect (and the
//	    CONNECT handshake), write 1 byte, read it back, close. Setup time
//	    per connection in µs: median, p90, min, max.
//	sbxbench startup [--runs N] [--warmup W] -- CMD [ARGS...]
//	    run CMD W+N times, stdin/stdout/stderr on /dev/null, wall time of
//	    each (fork to exit); the W warm-up runs are discarded. Median, min
//	    and max in ms, and the number of runs that exited non-zero.
//
// Only loopback addresses are used by bench/sandbox.sh; sbxbench itself
// dials exactly what it is told.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

const writeSize = 256 << 10

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "sink":
		err = serve(args, handleSink)
	case "echo":
		err = serve(args, handleEcho)
	case "relay":
		if len(args) != 2 {
			usage()
		}
		err = serve(args[:1], func(c net.Conn) { handleRelay(c, args[1]) })
	case "push":
		err = push(args)
	case "connects":
		err = connects(args)
	case "startup":
		err = startup(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbxbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: sbxbench sink ADDR | echo ADDR | relay ADDR TARGET
       sbxbench push [--proxy HOST:PORT] TARGET BYTES
       sbxbench connects [--proxy HOST:PORT] TARGET N
       sbxbench startup [--runs N] [--warmup W] -- CMD [ARGS...]
`)
	os.Exit(2)
}

func emit(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

// ------------------------------------------------------------- servers --

func serve(args []string, handle func(net.Conn)) error {
	if len(args) != 1 {
		usage()
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go handle(c)
	}
}

func handleSink(c net.Conn) {
	defer c.Close()
	buf := make([]byte, writeSize)
	var n int64
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if err != nil {
			if err != io.EOF {
				return
			}
			break
		}
	}
	var ack [8]byte
	binary.BigEndian.PutUint64(ack[:], uint64(n))
	_, _ = c.Write(ack[:])
}

// handleRelay is the least a one-hop TCP relay can do: dial target and
// splice both ways (io.Copy between TCP connections is splice(2) through
// a pipe), the floor under any proxy's throughput on this machine.
func handleRelay(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(u, c)
		_ = u.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, u)
	<-done
}

func handleEcho(c net.Conn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
}

// ------------------------------------------------------------- clients --

// dial connects to target, through the HTTP CONNECT proxy if one is given.
func dial(proxy, target string) (net.Conn, error) {
	if proxy == "" {
		return net.Dial("tcp", target)
	}
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		c.Close()
		return nil, err
	}
	// The server says nothing before we write, so the reader holds only
	// the proxy's reply; a byte beyond it would be an error.
	br := bufio.NewReaderSize(c, 512)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s via %s: %w", target, proxy, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s via %s: %s", target, proxy, resp.Status)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s via %s: unexpected bytes after the reply", target, proxy)
	}
	return c, nil
}

func clientFlags(name string, args []string, nargs int) (proxy string, rest []string) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.StringVar(&proxy, "proxy", "", "HTTP CONNECT proxy HOST:PORT")
	_ = fs.Parse(args)
	if fs.NArg() != nargs {
		usage()
	}
	return proxy, fs.Args()
}

// parseBytes parses 2GiB, 512MiB, 64KiB, 1GB, 1000000.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func push(args []string) error {
	proxy, rest := clientFlags("push", args, 2)
	target := rest[0]
	total, err := parseBytes(rest[1])
	if err != nil {
		return err
	}
	c, err := dial(proxy, target)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	buf := make([]byte, writeSize)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	for left := total; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:n]); err != nil {
			return fmt.Errorf("write after %d bytes: %w", total-left, err)
		}
		left -= n
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	var ack [8]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("waiting for the sink's count: %w", err)
	}
	secs := time.Since(start).Seconds()
	if got := int64(binary.BigEndian.Uint64(ack[:])); got != total {
		return fmt.Errorf("sink counted %d bytes, sent %d", got, total)
	}
	return emit(map[string]any{
		"bytes": total, "seconds": round(secs, 4), "mbps": round(float64(total)*8/secs/1e6, 1),
		"proxied": proxy != "",
	})
}

func connects(args []string) error {
	proxy, rest := clientFlags("connects", args, 2)
	target := rest[0]
	n, err := strconv.Atoi(rest[1])
	if err != nil || n <= 0 {
		return fmt.Errorf("bad N %q", rest[1])
	}
	us := make([]float64, 0, n)
	one := []byte{'x'}
	back := make([]byte, 1)
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		c, err := dial(proxy, target)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(one); err != nil {
			c.Close()
			return fmt.Errorf("connection %d: write: %w", i, err)
		}
		if _, err := io.ReadFull(c, back); err != nil {
			c.Close()
			return fmt.Errorf("connection %d: read: %w", i, err)
		}
		us = append(us, float64(time.Since(t0).Nanoseconds())/1e3)
		c.Close()
	}
	total := time.Since(start).Seconds()
	slices.Sort(us)
	return emit(map[string]any{
		"n": n, "median_us": round(median(us), 1), "p90_us": round(pct(us, 0.90), 1),
		"min_us": round(us[0], 1), "max_us": round(us[len(us)-1], 1),
		"per_s": round(float64(n)/total, 1), "proxied": proxy != "",
	})
}

// ------------------------------------------------------------- startup --

func startup(args []string) error {
	fs := flag.NewFlagSet("startup", flag.ExitOnError)
	runs := fs.Int("runs", 21, "measured runs")
	warm := fs.Int("warmup", 2, "discarded warm-up runs")
	_ = fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 || *runs <= 0 || *warm < 0 {
		usage()
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	var ms []float64
	fails, lastCode := 0, 0
	for i := range *warm + *runs {
		cmd := &exec.Cmd{Path: path, Args: argv, Stdin: null, Stdout: null, Stderr: null}
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if i < *warm {
			continue
		}
		if err != nil {
			fails++
			lastCode = -1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				lastCode = ee.ExitCode()
			}
		}
		ms = append(ms, float64(d.Nanoseconds())/1e6)
	}
	slices.Sort(ms)
	return emit(map[string]any{
		"runs": *runs, "warmup": *warm, "median_ms": round(median(ms), 2),
		"min_ms": round(ms[0], 2), "max_ms": round(ms[len(ms)-1], 2),
		"p90_ms": round(pct(ms, 0.90), 2), "fails": fails, "last_fail_code": lastCode,
	})
}

// ------------------------------------------------------------- helpers --

func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []float64, p float64) float64 {
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func round(v float64, digits int) float64 {
	m := 1.0
	for range digits {
		m *= 10
	}
	return float64(int64(v*m+0.5)) / m
}
