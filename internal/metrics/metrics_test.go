package metrics

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLabels(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"tools/call", "tools/call"}, {"initialize", "initialize"}, {"resources/read", "resources"},
		{"notifications/cancelled", "notifications"}, {"x-made-up/../../etc", "other"}, {"", "other"},
	} {
		if got := MethodClass(tc.in); got != tc.want {
			t.Errorf("MethodClass(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"not in allow list", "not_allowed"}, {"resolve evil.example.com: no such host", "resolve"},
		{"dial 10.0.0.1:443: connection refused", "dial"}, {"port not granted", "port_not_granted"},
		{"something new about secret.example.com", "other"}, {"", ""},
	} {
		if got := EgressReason(tc.in); got != tc.want {
			t.Errorf("EgressReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"exit status 0", "exited"}, {"exit status 3", "failed"}, {"signal: killed", "killed"},
		{"signal: terminated", "terminated"}, {"signal: segmentation fault", "signal"},
	} {
		if got := ExitCause(tc.in); got != tc.want {
			t.Errorf("ExitCause(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestNilIsOff: every recorder is safe on nil (metrics off).
func TestNilIsOff(t *testing.T) {
	var b *Bridge
	b.SessionOpened()
	b.Calls("tools/call", 1)
	b.CallDone("x", time.Second)
	b.HTTP().Refused("auth")
	var s *Sandboxes
	s.Started("a", time.Now())
	s.Egress("connect", "deny", "x")
	s.Exited("a", 0, "", false, 0, 0, 0)
	if NewBridge(nil, "x", nil) != nil || NewSandboxes(nil) != nil {
		t.Error("a nil registry makes recorders")
	}
}

func TestSandboxes(t *testing.T) {
	r := NewRegistry("test", "0")
	s := NewSandboxes(r)
	t0 := time.Now()
	s.Started("a", t0)
	s.Started("b", t0)
	s.Ready("a", t0.Add(30*time.Millisecond))
	s.Egress("connect", "allow", "connected")
	s.Egress("connect", "deny", "not in allow list")
	s.Egress("connect", "deny", "resolve x.example: no such host")
	s.Exited("a", 0, "", false, 2, 0, 0)
	s.Refused("b")
	want := `
# HELP soda_sandbox_egress_total Egress attempts from sandboxes, by kind (connect, mcp, dns), decision (allow, deny) and reason (the denial's class, empty when allowed).
# TYPE soda_sandbox_egress_total counter
soda_sandbox_egress_total{decision="allow",kind="connect",reason=""} 1
soda_sandbox_egress_total{decision="deny",kind="connect",reason="not_allowed"} 1
soda_sandbox_egress_total{decision="deny",kind="connect",reason="resolve"} 1
# HELP soda_sandbox_limit_hits_total Sandbox limits hit, by limit: memory (a process killed), tasks (a fork refused), cpu (a period throttled by the CPU quota), timeout.
# TYPE soda_sandbox_limit_hits_total counter
soda_sandbox_limit_hits_total{limit="memory"} 2
# HELP soda_sandboxes Sandboxes running now.
# TYPE soda_sandboxes gauge
soda_sandboxes 0
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want), "soda_sandbox_egress_total", "soda_sandbox_limit_hits_total", "soda_sandboxes"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.startSeconds); n != 1 {
		t.Errorf("start histogram: %d series", n)
	}
}

func TestLLM(t *testing.T) {
	r := NewRegistry("sodad", "test")
	l := NewLLM(r)
	l.Request("anthropic", 200)
	l.Request("anthropic", 403)
	l.Tokens("anthropic", "input", 17)
	l.Tokens("anthropic", "output", 9)
	l.Tokens("anthropic", "output", 0)
	l.UpstreamError("openai")
	var nilLLM *LLM
	nilLLM.Request("x", 200) // off: no panic
	got := gather(t, r)
	for _, want := range []string{
		`soda_llm_tokens_total{kind="input",provider="anthropic"} 17`,
		`soda_llm_tokens_total{kind="output",provider="anthropic"} 9`,
		`soda_llm_requests_total{code="2xx",provider="anthropic"} 1`,
		`soda_llm_requests_total{code="4xx",provider="anthropic"} 1`,
		`soda_llm_upstream_errors_total{provider="openai"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %s:\n%s", want, got)
		}
	}
}

// gather renders r's metrics in the text format.
func gather(t *testing.T, r *Registry) string {
	t.Helper()
	path := t.TempDir() + "/m.prom"
	if err := r.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
