// Package testkit holds what soda's end-to-end test packages (test/session,
// test/validate) and their client programs (test/sessioncall,
// test/validatecall) share: building soda's binaries, the sandbox control,
// a bearer-token HTTP transport, a goroutine-safe buffer and /proc
// readings of a process tree.
package testkit

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BuildBinaries builds the commands cmds (names under cmd/) into a new
// temporary directory and returns it; the caller removes it.
func BuildBinaries(prefix string, cmds ...string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	pkgs := make([]string, len(cmds))
	for i, c := range cmds {
		pkgs[i] = "cmd/" + c
	}
	if err := Build(dir, pkgs...); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Build builds soda's packages pkgs (paths in the module: cmd/sodad,
// test/sbxprobe) into dir, each as its base name, as the Makefile does:
// static, for init re-executes itself on an image's root, which has no
// libc; and cmd/sodactl twice, the lean sodactl (-tags soda_lean) and the
// full sodactl-full beside it, which the lean one executes for the
// commands it does not link.
func Build(dir string, pkgs ...string) error {
	for _, p := range pkgs {
		builds := [][]string{{"-o", filepath.Join(dir, filepath.Base(p))}}
		if p == "cmd/sodactl" {
			builds = [][]string{{"-tags", "soda_lean", "-o", filepath.Join(dir, "sodactl")}, {"-o", filepath.Join(dir, "sodactl-full")}}
		}
		for _, b := range builds {
			build := exec.Command("go", append(append([]string{"build"}, b...), "github.com/soda-project/soda/"+p)...)
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				return fmt.Errorf("go build %s %s: %v\n%s", strings.Join(b[:len(b)-2], " "), p, err, out)
			}
		}
	}
	return nil
}

// HostLacks starts the reason of a skip that a control decided: the
// machine lacks the feature the test needs. test/skipreport accepts such
// skips in CI; any other skip of a test that runs nowhere else in the
// suite fails CI.
const HostLacks = "host lacks:"

// BenchmarkOnly starts the reason of a skip of a benchmark run by a make
// bench target (SODA_BENCH=1), never by CI: it measures, it does not
// test. test/skipreport lists such skips apart.
const BenchmarkOnly = "benchmark:"

// SkipHostLacks skips t because a control found the machine without what
// the test needs; the reason says what and which control.
func SkipHostLacks(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Skipf(HostLacks+" "+format, args...)
}

// RequireSandbox skips t where the host cannot make a sandbox, after a
// control: root can; otherwise an unprivileged user namespace must work.
func RequireSandbox(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if err := exec.Command("unshare", "--user", "--map-current-user", "--net", "--mount", "--pid", "--fork", "true").Run(); err != nil {
		SkipHostLacks(t, "user namespaces for an unprivileged sandbox (unshare --user: %v); CI runs these tests as root", err)
	}
}

// Bearer is an http.RoundTripper adding Authorization: Bearer Token.
type Bearer struct{ Token string }

// RoundTrip implements http.RoundTripper.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return http.DefaultTransport.RoundTrip(r)
}

// Buffer is a strings.Builder safe for concurrent writes (a process's
// stderr) and reads.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns what was written.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Children lists pid's children, sorted.
func Children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Descendants lists pid's descendants, children first.
func Descendants(pid int) []int {
	var out []int
	for _, c := range Children(pid) {
		out = append(out, c)
		out = append(out, Descendants(c)...)
	}
	return out
}

// Comm is process pid's command name ("" when gone).
func Comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// Inits lists the children of pid that are a sandbox's init.
func Inits(pid int) []int {
	var out []int
	for _, c := range Children(pid) {
		if strings.HasPrefix(Comm(c), "soda-sandbox-in") {
			out = append(out, c)
		}
	}
	return out
}

// Alive reports whether pid runs (not gone, not a zombie).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// RSSKiB is process pid's resident memory (0 when gone).
func RSSKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// TimeIt runs f n times and returns each run's duration.
func TimeIt(n int, f func()) []time.Duration {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		f()
		out = append(out, time.Since(t0))
	}
	return out
}

// Median is the median of d.
func Median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
