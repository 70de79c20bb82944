// Package validate tests soda-validated through the real subprocess with
// the go-sdk client: real shellcheck and tsc, hostile requests, the busy
// refusal, the deadline, a validator trying the network, and the
// attestation's digests recomputed independently.
package validate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

var bin, repo string

func TestMain(m *testing.M) {
	dir, err := testkit.BuildBinaries("soda-validate-test-", "soda-validated", "soda-sandbox-init", "sodactl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	wd, _ := os.Getwd()
	repo = filepath.Join(wd, "..", "..")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireSandbox skips where the host cannot make a sandbox.
func requireSandbox(t *testing.T) { testkit.RequireSandbox(t) }

// worker writes conf as KIND.conf in a temp directory, starts
// soda-validated KIND and connects the go-sdk client.
func worker(t *testing.T, kind, conf string) (*mcp.ClientSession, string) {
	t.Helper()
	return workerIn(t, t.TempDir(), kind, conf)
}

// workerIn is worker with the owner directories under state.
func workerIn(t *testing.T, state, kind, conf string) (*mcp.ClientSession, string) {
	t.Helper()
	requireSandbox(t)
	dir := t.TempDir()
	p := filepath.Join(dir, kind+".conf")
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "soda-validated"), "--config-dir", dir, "--state-dir", state, "--allow-degraded", "cgroup", kind)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("soda-validated stderr:\n%s", stderr.String())
		}
	})
	return cs, p
}

type verdict struct {
	Completed   bool    `json:"completed"`
	Verdict     *string `json:"verdict"`
	Status      string  `json:"status"`
	Cleanup     string  `json:"cleanup"`
	Untrusted   bool    `json:"diagnostics_untrusted"`
	Diagnostics []struct {
		File, Severity, Message string
		Line                    int
	} `json:"diagnostics"`
	Digests struct {
		Sources         map[string]string `json:"sources"`
		All             string            `json:"all"`
		Config          string            `json:"config"`
		Validator       string            `json:"validator"`
		ValidatorBinary string            `json:"validator_binary"`
		Image           string            `json:"image"`
	} `json:"digests"`
	Limits struct {
		MemoryMax int64  `json:"memory_max"`
		TmpSize   int64  `json:"tmp_size"`
		HomeSize  int64  `json:"home_size"`
		Network   string `json:"network"`
	} `json:"limits"`
	Attestation struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string
			Digest map[string]string
		} `json:"subject"`
		Predicate struct {
			Result        string `json:"result"`
			Configuration []struct {
				Name   string
				Digest map[string]string
			} `json:"configuration"`
		} `json:"predicate"`
	} `json:"attestation"`
}

func validate(t *testing.T, cs *mcp.ClientSession, files ...[2]string) (verdict, string, bool) {
	t.Helper()
	var fs []any
	for _, f := range files {
		fs = append(fs, map[string]any{"path": f[0], "content": f[1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": fs}})
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	var v verdict
	data, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(data, &v)
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return v, text.String(), res.IsError
}

const shellcheckConf = `[Validator]
ExecStart=/usr/bin/shellcheck --norc --format=gcc --shell=bash %FILES%
Files=*.sh
Output=gcc
ValidExit=0
InvalidExit=1
`

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestShellcheck(t *testing.T) {
	if _, err := os.Stat("/usr/bin/shellcheck"); err != nil {
		t.Fatalf("shellcheck is not installed (.ci/run installs it): %v", err)
	}
	cs, conf := worker(t, "shellcheck", shellcheckConf)
	good := "#!/bin/bash\nset -eu\necho \"hello $1\"\n"
	v, text, isErr := validate(t, cs, [2]string{"bin/ok.sh", good})
	if isErr || !v.Completed || v.Verdict == nil || *v.Verdict != "valid" || v.Cleanup != "clean" {
		t.Fatalf("a valid script: %+v\n%s", v, text)
	}
	bad := "#!/bin/bash\nfor f in $(ls *.txt); do\n  cat $f\ndone\n"
	v, text, isErr = validate(t, cs, [2]string{"bad.sh", bad}, [2]string{"bin/ok.sh", good})
	if isErr || !v.Completed || v.Verdict == nil || *v.Verdict != "invalid" || len(v.Diagnostics) == 0 || !v.Untrusted {
		t.Fatalf("an invalid script: %+v\n%s", v, text)
	}
	found := false
	for _, d := range v.Diagnostics {
		if d.File == "bad.sh" && d.Line > 0 && strings.Contains(d.Message, "SC") {
			found = true
		}
	}
	if !found {
		t.Errorf("no ShellCheck diagnostic with a position for bad.sh: %+v", v.Diagnostics)
	}
	// The digests, recomputed here.
	if v.Digests.Sources["bad.sh"] != sha(bad) || v.Digests.Sources["bin/ok.sh"] != sha(good) {
		t.Errorf("source digests %v", v.Digests.Sources)
	}
	all := sha256.New()
	for _, n := range []string{"bad.sh", "bin/ok.sh"} {
		all.Write([]byte(n + "\x00" + sha([]string{bad, good}[map[string]int{"bad.sh": 0, "bin/ok.sh": 1}[n]]) + "\n"))
	}
	if v.Digests.All != hex.EncodeToString(all.Sum(nil)) {
		t.Errorf("digest of all sources %s, recomputed %s", v.Digests.All, hex.EncodeToString(all.Sum(nil)))
	}
	confData, _ := os.ReadFile(conf)
	binData, _ := os.ReadFile("/usr/bin/shellcheck")
	// The validator digest, as soda-validated(8) documents it: NUL-
	// terminated fields "binary", its path, its sha256 (no tree here).
	validator := sha("binary\x00/usr/bin/shellcheck\x00" + sha(string(binData)) + "\x00")
	if v.Digests.Config != sha(string(confData)) || v.Digests.ValidatorBinary != sha(string(binData)) || v.Digests.Validator != validator {
		t.Errorf("config digest %s (want %s), validator binary %s (want %s), validator %s (want %s)", v.Digests.Config, sha(string(confData)),
			v.Digests.ValidatorBinary, sha(string(binData)), v.Digests.Validator, validator)
	}
	a := v.Attestation
	if a.Type != "https://in-toto.io/Statement/v1" || a.PredicateType != "https://in-toto.io/attestation/test-result/v0.1" ||
		a.Predicate.Result != "fail" || len(a.Subject) != 2 || a.Subject[0].Digest["sha256"] != sha(bad) || len(a.Predicate.Configuration) != 3 ||
		a.Predicate.Configuration[1].Digest["sha256"] != sha(string(binData)) || a.Predicate.Configuration[2].Digest["sha256"] != validator {
		t.Errorf("attestation %+v", a)
	}
	if v.Limits.Network != "none" || v.Limits.MemoryMax != 1<<30 {
		t.Errorf("limits %+v", v.Limits)
	}
}

func TestTypeScript(t *testing.T) {
	ts := filepath.Join(repo, "test", "node", "node_modules", "typescript")
	if _, err := os.Stat(filepath.Join(ts, "bin", "tsc")); err != nil {
		t.Fatalf("typescript is not installed in test/node (make deps-test): %v", err)
	}
	ts, _ = filepath.Abs(ts)
	cs, _ := worker(t, "tsc", fmt.Sprintf(`[Validator]
ExecStart=/usr/bin/node %s/bin/tsc --noEmit --pretty false --strict --target es2022 %%FILES%%
EndOfOptions=
Files=*.ts
Output=tsc
InvalidExit=1 2
ReadOnlyPaths=%s
`, ts, ts))
	v, text, isErr := validate(t, cs, [2]string{"src/a.ts", "export function twice(x: number): number { return 2 * x; }\n"})
	if isErr || v.Verdict == nil || *v.Verdict != "valid" {
		t.Fatalf("valid TypeScript: %+v\n%s", v, text)
	}
	v, text, _ = validate(t, cs, [2]string{"src/a.ts", "export const n: number = 'text';\n"})
	if v.Verdict == nil || *v.Verdict != "invalid" || len(v.Diagnostics) == 0 || !strings.Contains(v.Diagnostics[0].Message, "TS2322") || v.Diagnostics[0].Line != 1 {
		t.Fatalf("invalid TypeScript: %+v\n%s", v, text)
	}
}

// TestRefusals: each hostile name and size bound is refused before
// anything is allocated (no sandbox starts: the refusal is immediate).
func TestRefusals(t *testing.T) {
	cs, _ := worker(t, "shellcheck", shellcheckConf)
	big := strings.Repeat("x", 64<<10+1)
	for _, c := range []struct {
		name  string
		files [][2]string
		want  string
	}{
		{"none", nil, "1 to 8"},
		{"nine", [][2]string{{"1.sh", ""}, {"2.sh", ""}, {"3.sh", ""}, {"4.sh", ""}, {"5.sh", ""}, {"6.sh", ""}, {"7.sh", ""}, {"8.sh", ""}, {"9.sh", ""}}, "1 to 8"},
		{"traversal", [][2]string{{"../x.sh", ""}}, `".."`},
		{"absolute", [][2]string{{"/etc/x.sh", ""}}, "absolute"},
		{"device", [][2]string{{"aux.sh", ""}}, "device name"},
		{"NUL name", [][2]string{{"a\x00.sh", ""}}, "NUL"},
		{"NUL content", [][2]string{{"a.sh", "a\x00b"}}, "NUL"},
		{"case overlap", [][2]string{{"A.sh", ""}, {"a.sh", ""}}, "overlap"},
		{"dir overlap", [][2]string{{"d.sh", ""}, {"D.sh/x.sh", ""}}, "overlap"},
		{"too big", [][2]string{{"a.sh", big}}, "per file"},
		{"too much", [][2]string{{"1.sh", big[:60000]}, {"2.sh", big[:60000]}, {"3.sh", big[:60000]}, {"4.sh", big[:60000]}, {"5.sh", big[:60000]}}, "in all"},
		{"pattern", [][2]string{{"a.py", ""}}, "takes only"},
		{"long name", [][2]string{{strings.Repeat("a", 300) + ".sh", ""}}, "at most 255"},
		{"long s and s", [][2]string{{"\u017f.sh", ""}, {"s.sh", ""}}, "overlap"},
		{"Kelvin sign and k", [][2]string{{"\u212a.sh", ""}, {"k.sh", ""}}, "overlap"},
		{"C1 control", [][2]string{{"a\u0085.sh", ""}}, "U+0085"},
		{"bidi override", [][2]string{{"a\u202egs.sh", ""}}, "U+202E"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, text, isErr := validate(t, cs, c.files...)
			if !isErr || !strings.Contains(text, "refused") || !strings.Contains(text, c.want) {
				t.Errorf("want refused naming %q, got isError %v: %s", c.want, isErr, text)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refusal took %s: something was allocated first", d)
			}
		})
	}
}

// TestBusyDeadlineNetwork: a second call while one runs is busy (not
// queued); a validator past its deadline gets no verdict; one that tries
// the network finds none.
func TestBusyDeadlineNetwork(t *testing.T) {
	cs, _ := worker(t, "slow", `[Validator]
ExecStart=/bin/sh -c "sleep 3; exit 0" %FILES%
Files=*.sh
[Limits]
Deadline=1s
`)
	var wg sync.WaitGroup
	var first verdict
	wg.Add(1)
	go func() {
		defer wg.Done()
		first, _, _ = validate(t, cs, [2]string{"a.sh", "true\n"})
	}()
	time.Sleep(300 * time.Millisecond)
	_, text, isErr := validate(t, cs, [2]string{"b.sh", "true\n"})
	if !isErr || !strings.Contains(text, "busy") {
		t.Errorf("a second call while one runs: isError %v %s, want busy", isErr, text)
	}
	wg.Wait()
	if first.Completed || first.Verdict != nil || first.Status != "deadline" {
		t.Errorf("a validator past its deadline: %+v, want no verdict (deadline)", first)
	}

	cs, _ = worker(t, "net", `[Validator]
ExecStart=/bin/sh -c "curl -sS -m 3 http://1.1.1.1/ && echo reached; exit 1" %FILES%
Files=*.sh
`)
	v, text, _ := validate(t, cs, [2]string{"a.sh", "true\n"})
	if strings.Contains(text, "reached") || len(v.Diagnostics) == 0 {
		t.Errorf("a validator trying the network: %+v\n%s", v, text)
	}
}

// TestCancel: an explicit cancellation retires the run (the validator is
// stopped, not left to its end), and the worker is free again once its
// sandbox is gone.
func TestCancel(t *testing.T) {
	cs, _ := worker(t, "slow", `[Validator]
ExecStart=/bin/sh -c "sleep 20; exit 0" %FILES%
Files=*.sh
[Limits]
Deadline=30s
`)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": []any{map[string]any{"path": "a.sh", "content": "true\n"}}}})
	cancel()
	if err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	// Free again well before the validator's 20 s: a call is admitted
	// (and then cancelled in turn).
	for {
		callCtx, callCancel := context.WithTimeout(context.Background(), time.Second)
		res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": []any{map[string]any{"path": "b.sh", "content": "true\n"}}}})
		callCancel()
		busy := err == nil && res.IsError && strings.Contains(fmt.Sprint(res.Content[0]), "busy")
		if !busy {
			break // admitted: it ran until this call's own cancellation
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("still busy 10 s after the cancellation: the validator ran on")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the worker was free again %s after the call was cancelled at 0.5 s", time.Since(start))
}

// TestOwnership: two workers on one owner directory, the second refuses;
// a corrupt or missing owner record is refused, never made anew; a
// --reconcile start writes a fresh one.
func TestOwnership(t *testing.T) {
	requireSandbox(t)
	state := t.TempDir()
	conf := shellcheckConf
	workerIn(t, state, "shellcheck", conf)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shellcheck.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	second := func(extra ...string) (string, error) {
		args := append([]string{"--config-dir", dir, "--state-dir", state, "--allow-degraded", "cgroup"}, extra...)
		cmd := exec.Command(filepath.Join(bin, "soda-validated"), append(args, "shellcheck")...)
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := second(); err == nil || !strings.Contains(out, "held by another soda-validated") {
		t.Errorf("a second worker on the same owner directory: %v\n%s", err, out)
	}
	// A fresh state directory: the first worker leaves, the record is
	// broken, then removed.
	state2 := t.TempDir()
	if out, err := secondIn(dir, state2); err != nil {
		t.Fatalf("first start: %v\n%s", err, out)
	}
	rec := filepath.Join(state2, "shellcheck", "owner.json")
	if err := os.WriteFile(rec, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := secondIn(dir, state2); err == nil || !strings.Contains(out, "corrupt") || !strings.Contains(out, "--reconcile") {
		t.Errorf("a corrupt owner record: %v\n%s", err, out)
	}
	os.Remove(rec)
	if out, err := secondIn(dir, state2); err == nil || !strings.Contains(out, "missing") {
		t.Errorf("a missing owner record: %v\n%s", err, out)
	}
	if out, err := secondIn(dir, state2, "--reconcile"); err != nil {
		t.Errorf("--reconcile: %v\n%s", err, out)
	}
	if _, err := os.Stat(rec); err != nil {
		t.Errorf("--reconcile wrote no record: %v", err)
	}
}

// secondIn starts soda-validated shellcheck with an empty stdin (it ends
// at once) and returns its output.
func secondIn(confDir, state string, extra ...string) (string, error) {
	args := append([]string{"--config-dir", confDir, "--state-dir", state, "--allow-degraded", "cgroup"}, extra...)
	cmd := exec.Command(filepath.Join(bin, "soda-validated"), append(args, "shellcheck")...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFlagInjection: a file name that is an option never reaches the
// validator's argv as one. With the real shellcheck, a clean script named
// --enable=all,x.sh (which turned a valid verdict into invalid) and one
// named -x/a.sh (which crashed shellcheck) are refused before anything
// runs; and the kind's end-of-options marker reaches the validator right
// before the files.
func TestFlagInjection(t *testing.T) {
	if _, err := os.Stat("/usr/bin/shellcheck"); err != nil {
		t.Fatalf("shellcheck is not installed (.ci/run installs it): %v", err)
	}
	cs, _ := worker(t, "shellcheck", shellcheckConf)
	// Clean by default; invalid under shellcheck's optional checks (SC2250).
	clean := "#!/bin/bash\nset -eu\necho \"hello $HOME\"\n"
	for _, name := range []string{"--enable=all,x.sh", "-x/a.sh", "src/-o.sh"} {
		v, text, isErr := validate(t, cs, [2]string{"ok.sh", clean}, [2]string{name, clean})
		if !isErr || !strings.Contains(text, "refused") || !strings.Contains(text, `"-"`) {
			t.Errorf("%s: isError %v, status %q: %s; want refused (a name starting with \"-\")", name, isErr, v.Status, text)
		}
	}
	// The same clean script under a plain name is valid: the refusals
	// above are about the names.
	if v, text, _ := validate(t, cs, [2]string{"x.sh", clean}); v.Verdict == nil || *v.Verdict != "valid" {
		t.Fatalf("the clean script: %+v\n%s", v, text)
	}

	// What the validator receives: sh -c puts the first argument after
	// the script in $0, the rest in $@.
	argvConf := `[Validator]
ExecStart=/bin/sh -c "echo \"a.sh:1:1: error: argv $0 $*\"; exit 1" %FILES%
Files=*.sh
`
	cs, _ = worker(t, "argv", argvConf)
	v, text, _ := validate(t, cs, [2]string{"a.sh", "true\n"}, [2]string{"b.sh", "true\n"})
	if len(v.Diagnostics) != 1 || v.Diagnostics[0].Message != "argv -- a.sh b.sh" {
		t.Errorf("the validator's argv: %+v\n%s; want the files after --", v.Diagnostics, text)
	}
	cs, _ = worker(t, "argv", argvConf+"EndOfOptions=\n")
	v, text, _ = validate(t, cs, [2]string{"a.sh", "true\n"}, [2]string{"b.sh", "true\n"})
	if len(v.Diagnostics) != 1 || v.Diagnostics[0].Message != "argv a.sh b.sh" {
		t.Errorf("the validator's argv with EndOfOptions= empty: %+v\n%s; want the files alone", v.Diagnostics, text)
	}
}

// TestValidatorTree: the validator digest covers the kind's ReadOnlyPaths
// tree, not only Command[0] (here /bin/sh, as /usr/bin/node is for tsc):
// a script of the tree changed between calls fails the next call, naming
// it, and after a restart the digest differs.
func TestValidatorTree(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	tree := filepath.Join(dir, "tool")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} { // the sandbox's own uid reads it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(tree, "check.sh")
	if err := os.WriteFile(script, []byte("exit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("[Validator]\nExecStart=/bin/sh %s %%FILES%%\nFiles=*.sh\nReadOnlyPaths=%s\n", script, tree)
	state := t.TempDir()
	cs, _ := workerIn(t, state, "tree", conf)
	v, text, _ := validate(t, cs, [2]string{"a.sh", "true\n"})
	if v.Verdict == nil || *v.Verdict != "valid" {
		t.Fatalf("the first call: %+v\n%s", v, text)
	}
	first := v.Digests.Validator
	sh, _ := os.ReadFile("/bin/sh")
	if first == "" || first == sha(string(sh)) {
		t.Errorf("validator digest %q: it covers /bin/sh alone", first)
	}
	if err := os.WriteFile(script, []byte("exit 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, text, isErr := validate(t, cs, [2]string{"a.sh", "true\n"})
	if !isErr || v.Status != "failed" || !strings.Contains(text, "check.sh changed") {
		t.Errorf("a call after the tree's script changed: status %q isError %v\n%s", v.Status, isErr, text)
	}
	cs.Close()
	cs, _ = workerIn(t, state, "tree", conf)
	v, text, _ = validate(t, cs, [2]string{"a.sh", "true\n"})
	if v.Digests.Validator == first || v.Digests.Validator == "" {
		t.Errorf("after a restart the validator digest is %q, the first was %q\n%s", v.Digests.Validator, first, text)
	}
}

// probeScript is a request file that a test kind runs as its validator
// (ExecStart=/bin/sh %FILES%): it reports the sizes of the writable
// places and the cgroup limits it runs under, one diagnostic each
// ("KEY VALUE").
const probeScript = `size() { echo "a.sh:1:1: error: $1 $(( $(stat -f -c '%b * %S' "$2") ))"; }
size tmp /tmp
size vartmp /var/tmp
size home "$HOME"
v() { [ -r "$2" ] && echo "a.sh:2:1: error: $1 $(cat "$2")"; }
v pids /sys/fs/cgroup/pids.max || v pids /sys/fs/cgroup/pids/pids.max
v memory /sys/fs/cgroup/memory.max || v memory /sys/fs/cgroup/memory/memory.limit_in_bytes
v cpu /sys/fs/cgroup/cpu.max || v cpu /sys/fs/cgroup/cpu/cpu.cfs_quota_us
exit 1
`

// TestLimitsReachTheSandbox: each call's sandbox runs under the kind's
// limits, read from inside it: MemoryMax=, TasksMax=, CPUQuota= (where the
// host's cgroups show them to the sandbox), and a private /tmp (and
// /var/tmp) and home of 64 MiB each by default, Limits.TmpSize= and
// Limits.HomeSize= when set; the verdict's limits say the same.
func TestLimitsReachTheSandbox(t *testing.T) {
	probe := func(t *testing.T, limits string) (map[string]string, verdict) {
		t.Helper()
		cs, _ := worker(t, "probe", "[Validator]\nExecStart=/bin/sh %FILES%\nEndOfOptions=\nFiles=*.sh\n[Limits]\nMemoryMax=256M\nTasksMax=16\nCPUQuota=50%\n"+limits)
		v, text, _ := validate(t, cs, [2]string{"a.sh", probeScript})
		got := map[string]string{}
		for _, d := range v.Diagnostics {
			if k, val, ok := strings.Cut(d.Message, " "); ok {
				got[k] = val
			}
		}
		if got["tmp"] == "" || got["home"] == "" {
			t.Fatalf("the probe did not report: %+v\n%s", v, text)
		}
		return got, v
	}
	got, v := probe(t, "")
	mib64 := fmt.Sprint(64 << 20)
	if got["tmp"] != mib64 || got["vartmp"] != mib64 || got["home"] != mib64 {
		t.Errorf("default sizes: /tmp %s, /var/tmp %s, home %s bytes; want %s each", got["tmp"], got["vartmp"], got["home"], mib64)
	}
	if v.Limits.TmpSize != 64<<20 || v.Limits.HomeSize != 64<<20 {
		t.Errorf("the verdict's limits: %+v", v.Limits)
	}
	if got["pids"] == "" && got["memory"] == "" {
		t.Logf("the host's cgroups are not visible in the sandbox: the cgroup limits are not read from inside here")
	} else {
		if got["pids"] != "16" || got["memory"] != fmt.Sprint(256<<20) || (got["cpu"] != "50000 100000" && got["cpu"] != "50000") {
			t.Errorf("cgroup limits in the sandbox: pids %q, memory %q, cpu %q; want 16, 256 MiB, 50%%", got["pids"], got["memory"], got["cpu"])
		}
	}
	got, v = probe(t, "TmpSize=16M\nHomeSize=8M\n")
	if got["tmp"] != fmt.Sprint(16<<20) || got["vartmp"] != fmt.Sprint(16<<20) || got["home"] != fmt.Sprint(8<<20) {
		t.Errorf("TmpSize=16M HomeSize=8M: /tmp %s, /var/tmp %s, home %s bytes", got["tmp"], got["vartmp"], got["home"])
	}
	if v.Limits.TmpSize != 16<<20 || v.Limits.HomeSize != 8<<20 {
		t.Errorf("the verdict's limits: %+v", v.Limits)
	}
}
