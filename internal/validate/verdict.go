package validate

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Statuses of a Verdict.
const (
	StatusValid     = "valid"
	StatusInvalid   = "invalid"
	StatusDeadline  = "deadline"         // killed at the deadline: no verdict
	StatusCrashed   = "crashed"          // an exit status the kind does not map: no verdict
	StatusMalformed = "malformed-output" // invalid, yet no diagnostic could be read: no verdict
	StatusFailed    = "failed"           // the sandbox could not run it: no verdict
	StatusCancelled = "cancelled"        // the call was cancelled: no verdict
)

// Diagnostic is one finding of the validator (untrusted text).
type Diagnostic struct {
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Severity string `json:"severity,omitempty"`
	Message  string `json:"message"`
}

// Digests attribute a verdict to its inputs (sha256, hex).
type Digests struct {
	Sources map[string]string `json:"sources"`
	All     string            `json:"all"`
	Config  string            `json:"config"`
	// Validator covers what runs: sha256 over the binary's record and
	// each ReadOnlyPaths tree's (tool.validatorDigest), the parts of which
	// are ValidatorBinary (the sha256 of Command[0]) and ValidatorTrees
	// (each tree's digest, by path).
	Validator       string            `json:"validator"`
	ValidatorBinary string            `json:"validator_binary"`
	ValidatorTrees  map[string]string `json:"validator_trees,omitempty"`
	// Image is the manifest digest (sha256:HEX) of the image the
	// validator ran in, part of Validator; empty on the host's system.
	Image string `json:"image,omitempty"`
}

// Limits are the limits a call ran under.
type Limits struct {
	MemoryMax       int64  `json:"memory_max"`
	TasksMax        int64  `json:"tasks_max"`
	CPUQuotaPercent uint64 `json:"cpu_quota_percent"`
	DeadlineSeconds int64  `json:"deadline_seconds"`
	TmpSize         int64  `json:"tmp_size"`
	HomeSize        int64  `json:"home_size"`
	Network         string `json:"network"`
}

// Verdict is a call's outcome. Completed is true when the validator ran to
// an exit status the kind maps; Verdict is then "valid" or "invalid", and
// nil otherwise.
type Verdict struct {
	Kind      string  `json:"kind"`
	Completed bool    `json:"completed"`
	Verdict   *string `json:"verdict"`
	Status    string  `json:"status"`
	ExitCode  *int    `json:"exit_code,omitempty"`
	// Diagnostics are the validator's findings, capped at 16 KiB of text;
	// Untrusted says they are the validator's words, not soda's.
	Diagnostics          []Diagnostic `json:"diagnostics"`
	DiagnosticsTruncated bool         `json:"diagnostics_truncated,omitempty"`
	Untrusted            bool         `json:"diagnostics_untrusted"`
	Digests              Digests      `json:"digests"`
	Limits               Limits       `json:"limits"`
	// Cleanup is "clean", or what failed (the worker is poisoned then).
	Cleanup     string    `json:"cleanup"`
	DurationMS  float64   `json:"duration_ms"`
	Attestation Statement `json:"attestation"`
}

// maxDiagBytes caps the diagnostics' text.
const maxDiagBytes = 16 << 10

var (
	gccLine = regexp.MustCompile(`^(.+?):(\d+):(\d+): ([a-z]+): (.*)$`)
	tscLine = regexp.MustCompile(`^(.+?)\((\d+),(\d+)\): ([a-z]+) (TS\d+: .*)$`)
)

// parseDiagnostics reads out in format; lines it cannot read are kept as
// messages without a position.
func parseDiagnostics(format, out string) ([]Diagnostic, bool) {
	var ds []Diagnostic
	size, cut := 0, false
	re := gccLine
	if format == OutputTSC {
		re = tscLine
	}
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		d := Diagnostic{Message: line}
		if m := re.FindStringSubmatch(line); m != nil {
			l, _ := strconv.Atoi(m[2])
			c, _ := strconv.Atoi(m[3])
			d = Diagnostic{File: m[1], Line: l, Column: c, Severity: m[4], Message: m[5]}
		}
		size += len(d.Message) + len(d.File) + len(d.Severity)
		if size > maxDiagBytes {
			cut = true
			break
		}
		ds = append(ds, d)
	}
	return ds, cut
}

// digests computes the sources' digests: each file's, and of all of them
// (sha256 over, for each file sorted by path, its path, a NUL, its
// digest, a newline).
func digests(files []File) (map[string]string, string) {
	each := map[string]string{}
	var names []string
	for _, f := range files {
		s := sha256.Sum256([]byte(f.Content))
		each[f.Path] = hex.EncodeToString(s[:])
		names = append(names, f.Path)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n + "\x00" + each[n] + "\n"))
	}
	return each, hex.EncodeToString(h.Sum(nil))
}

// Statement is an in-toto Statement v1 with the test-result predicate.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     TestResultsPred `json:"predicate"`
}

// Subject is a source the verdict is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// TestResultsPred is https://in-toto.io/attestation/test-result/v0.1.
type TestResultsPred struct {
	Result        string               `json:"result"` // pass | fail
	Configuration []ResourceDescriptor `json:"configuration"`
	PassedTests   []string             `json:"passedTests"`
	FailedTests   []string             `json:"failedTests"`
}

// ResourceDescriptor names a configuration input by digest.
type ResourceDescriptor struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// statement is v's in-toto Statement (only for a completed verdict the
// result is pass or fail; an incomplete one is fail with no test passed).
func statement(v *Verdict, k *Kind) Statement {
	st := Statement{Type: "https://in-toto.io/Statement/v1", PredicateType: "https://in-toto.io/attestation/test-result/v0.1"}
	var names []string
	for n := range v.Digests.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.Subject = append(st.Subject, Subject{Name: n, Digest: map[string]string{"sha256": v.Digests.Sources[n]}})
	}
	test := "soda-validate@" + k.Name
	p := TestResultsPred{Result: "fail", PassedTests: []string{}, FailedTests: []string{test},
		Configuration: []ResourceDescriptor{
			{Name: k.Path, Digest: map[string]string{"sha256": v.Digests.Config}},
			{Name: k.Command[0], Digest: map[string]string{"sha256": v.Digests.ValidatorBinary}},
		}}
	// The image the validator ran in, by its manifest digest.
	if v.Digests.Image != "" {
		p.Configuration = append(p.Configuration, ResourceDescriptor{Name: k.Image,
			Digest: map[string]string{"sha256": strings.TrimPrefix(v.Digests.Image, "sha256:")}})
	}
	// Each tree, and the validator digest over the binary and them.
	for _, root := range k.ReadOnlyPaths {
		if d, ok := v.Digests.ValidatorTrees[root]; ok {
			p.Configuration = append(p.Configuration, ResourceDescriptor{Name: root + "/", Digest: map[string]string{"sha256": d}})
		}
	}
	p.Configuration = append(p.Configuration, ResourceDescriptor{Name: "soda-validate@" + k.Name + " validator", Digest: map[string]string{"sha256": v.Digests.Validator}})
	if v.Completed && v.Verdict != nil && *v.Verdict == StatusValid {
		p.Result, p.PassedTests, p.FailedTests = "pass", []string{test}, []string{}
	}
	st.Predicate = p
	return st
}
