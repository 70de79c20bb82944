package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFollowAndJudge(t *testing.T) {
	// go test -json of one package: a pass, a skip for want of SODA_E2E
	// (run by another part), a host-lacks skip, a skip that hides its
	// test, and a failure whose output must be printed.
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestE2E","Output":"    e2e_test.go:10: needs SODA_E2E=1\n"}`,
		`{"Action":"output","Package":"p","Test":"TestE2E","Output":"--- SKIP: TestE2E (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestE2E"}`,
		`{"Action":"output","Package":"p","Test":"TestV2/v2","Output":"    h_test.go:3: host lacks: a cpu controller on cgroup2\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestV2/v2"}`,
		`{"Action":"output","Package":"p","Test":"TestLazy","Output":"    l_test.go:7: not today\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestLazy"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"    b_test.go:9: got 1, want 2\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad"}`,
		`not json: a build error`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}`,
	}, "\n")
	var out bytes.Buffer
	recs, err := follow(strings.NewReader(in), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"got 1, want 2", "not json: a build error", "FAIL\tp"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "=== RUN   TestA") {
		t.Errorf("a passed test's output printed without -v:\n%s", out.String())
	}
	// -v prints everything and still finds the reasons.
	var vout bytes.Buffer
	vrecs, err := follow(strings.NewReader(in), &vout, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(vout.String(), "=== RUN   TestA") || len(vrecs) != len(recs) {
		t.Errorf("-v: %d records (want %d), output:\n%s", len(vrecs), len(recs), vout.String())
	}
	for i := range vrecs {
		if vrecs[i] != recs[i] {
			t.Errorf("-v record %d = %+v, want %+v", i, vrecs[i], recs[i])
		}
	}
	// Another part of the suite ran TestE2E.
	recs = append(recs, record{Package: "p", Test: "TestE2E", Action: "pass"})
	hidden, accepted := judge(recs)
	names := func(rs []record) (n []string) {
		for _, r := range rs {
			n = append(n, r.Test+": "+r.Reason)
		}
		return n
	}
	if got := strings.Join(names(hidden), "; "); got != "TestLazy: not today" {
		t.Errorf("hidden = %q, want TestLazy's skip only", got)
	}
	if got := strings.Join(names(accepted), "; "); got != "TestE2E: needs SODA_E2E=1; TestV2/v2: host lacks: a cpu controller on cgroup2" {
		t.Errorf("accepted = %q", got)
	}
}

func TestSummaryStrict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lines  string
		strict bool
		want   int
	}{
		{"hidden skip under CI", `{"package":"p","test":"T","action":"skip","reason":"later"}`, true, 1},
		{"hidden skip elsewhere", `{"package":"p","test":"T","action":"skip","reason":"later"}`, false, 0},
		{"host lacks under CI", `{"package":"p","test":"T","action":"skip","reason":"host lacks: x"}`, true, 0},
		{"ran in another part", `{"package":"p","test":"T","action":"skip","reason":"later"}` + "\n" + `{"package":"p","test":"T","action":"pass"}`, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "skips.jsonl")
			if err := os.WriteFile(f, []byte(tc.lines+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			code, err := summary([]string{f}, &out, tc.strict)
			if err != nil || code != tc.want {
				t.Errorf("summary = %d, %v; want %d\n%s", code, err, tc.want, out.String())
			}
		})
	}
}
