// Command skipreport keeps the skipped tests of a run of the suite honest.
// It runs go test -json, prints the output as go test would, and records
// each test's outcome in a file; at the end of the run it lists the skips
// with their reasons, and under CI=true fails on a skip that hides a test:
// one the machine could have run.
//
//	skipreport run [-v] FILE -- go test -json ...   run, print, record (exit: go test's)
//	skipreport summary FILE                          list the skips; judge them under CI=true
//
// A skip is accepted when its reason starts with testkit.HostLacks ("host
// lacks:", a control found the machine without the feature), with
// testkit.BenchmarkOnly (a benchmark of a make bench target), or when the
// same test ran (passed or failed) in another go test of the same run: a
// test skipped by `make check` because it needs SODA_E2E=1 and run by
// `make test-e2e` is not hidden. Every other skip is a failure under
// CI=true, and a line of the summary elsewhere.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/soda-project/soda/test/testkit"
)

// event is one line of go test -json (test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// record is one test's outcome, one JSON line in the record file.
type record = testkit.Outcome

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "run":
		code, err = run(os.Args[2:])
	case "summary":
		code, err = summary(os.Args[2:], os.Stdout, os.Getenv("CI") == "true")
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipreport:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: skipreport run [-v] FILE -- go test -json ...\n       skipreport summary FILE")
	os.Exit(2)
}

// run runs the go test command after "--", prints its output and appends
// the outcome of each test to FILE.
func run(args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print every test's output (go test -v), not only failed tests'")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		usage()
	}
	out, err := os.OpenFile(rest[0], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 2, fmt.Errorf("open the record file: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(rest[2], rest[3:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 2, err
	}
	if err := cmd.Start(); err != nil {
		return 2, fmt.Errorf("start %s: %w", rest[2], err)
	}
	recs, err := follow(stdout, os.Stdout, *verbose)
	waitErr := cmd.Wait()
	enc := json.NewEncoder(out)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return 2, fmt.Errorf("write the record file: %w", err)
		}
	}
	if err != nil {
		return 2, err
	}
	var exit *exec.ExitError
	if errors.As(waitErr, &exit) {
		return exit.ExitCode(), nil
	}
	if waitErr != nil {
		return 2, waitErr
	}
	return 0, nil
}

// follow reads go test -json from r, writes the output to w (every test's
// when verbose, else only failed tests' and the packages' own lines, as go
// test prints without -v) and returns each test's outcome. A line that is
// not JSON (a build error) is printed as it is.
func follow(r io.Reader, w io.Writer, verbose bool) ([]record, error) {
	var recs []record
	held := map[string][]string{} // package + test: output not printed yet
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text())
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			if verbose || e.Test == "" && e.Output != "PASS\n" {
				io.WriteString(w, e.Output)
			}
			if e.Test != "" {
				held[key] = append(held[key], e.Output) // a skip's reason; a failure's output
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				continue
			}
			rec := record{Package: e.Package, Test: e.Test, Action: e.Action}
			if e.Action == "skip" {
				rec.Reason = skipReason(held[key])
			}
			if e.Action == "fail" && !verbose {
				for _, l := range held[key] {
					io.WriteString(w, l)
				}
			}
			delete(held, key)
			recs = append(recs, rec)
		}
	}
	return recs, sc.Err()
}

// skipReason is what a skipped test said last before its --- SKIP line:
// its t.Skip message ("file_test.go:12: why").
func skipReason(lines []string) string {
	for _, l := range slices.Backward(lines) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if _, msg, ok := strings.Cut(l, ".go:"); ok {
			if _, after, ok := strings.Cut(msg, ": "); ok {
				return after
			}
		}
		return l
	}
	return "(no reason given)"
}

// summary reads the records of FILE, prints the skips grouped by reason,
// and returns 1 when strict and a skip hides a test.
func summary(args []string, w io.Writer, strict bool) (int, error) {
	if len(args) != 1 {
		usage()
	}
	f, err := os.Open(args[0])
	if err != nil {
		return 2, fmt.Errorf("open the record file: %w", err)
	}
	defer f.Close()
	var recs []record
	dec := json.NewDecoder(f)
	for {
		var r record
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return 2, fmt.Errorf("read %s: %w", args[0], err)
		}
		recs = append(recs, r)
	}
	hidden, accepted := judge(recs)
	fmt.Fprintf(w, "skipreport: %d tests run, %d skips: %d where the host lacks the feature, of a benchmark, or of a test that ran in another part; %d hiding a test\n",
		len(recs)-len(hidden)-len(accepted), len(hidden)+len(accepted), len(accepted), len(hidden))
	for _, r := range accepted {
		fmt.Fprintf(w, "  skip ok:     %s %s: %s\n", r.Package, r.Test, r.Reason)
	}
	for _, r := range hidden {
		fmt.Fprintf(w, "  skip HIDES:  %s %s: %s\n", r.Package, r.Test, r.Reason)
	}
	if strict && len(hidden) > 0 {
		fmt.Fprintf(w, "skipreport: FAILED: under CI=true a skip must come from a control that found the host without the feature (testkit.HostLacks) or the test must run in another part of the suite\n")
		return 1, nil
	}
	return 0, nil
}

// judge splits the skips of recs into those that hide a test and those
// that do not (the host lacks the feature, or the test ran elsewhere).
// A test's skip is judged once, by its first reason.
func judge(recs []record) (hidden, accepted []record) {
	ran := map[string]bool{}
	for _, r := range recs {
		if r.Action != "skip" {
			ran[r.Package+"\x00"+r.Test] = true
		}
	}
	seen := map[string]bool{}
	for _, r := range recs {
		key := r.Package + "\x00" + r.Test
		if r.Action != "skip" || seen[key] {
			continue
		}
		seen[key] = true
		if ran[key] || strings.HasPrefix(r.Reason, testkit.HostLacks) || strings.HasPrefix(r.Reason, testkit.BenchmarkOnly) {
			accepted = append(accepted, r)
		} else {
			hidden = append(hidden, r)
		}
	}
	return hidden, accepted
}
