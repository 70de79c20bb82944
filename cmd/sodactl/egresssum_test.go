package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
)

func refusal(kind, target, reason string) sandbox.Record {
	return sandbox.Record{Event: "egress", Egress: &egress.Event{Kind: kind, Target: target, Decision: egress.DecisionDeny, Reason: reason}}
}

// TestEgressSummary: a run's refused egress is said once, at the end:
// the hosts outside the allow-list with what grants them, other refusals
// with their reason, and where every attempt is recorded.
func TestEgressSummary(t *testing.T) {
	allowed := sandbox.Record{Event: "egress", Egress: &egress.Event{Kind: egress.KindConnect, Target: "api.anthropic.com:443", Decision: egress.DecisionAllow}}
	var many []sandbox.Record
	for i := range 7 {
		many = append(many, refusal(egress.KindConnect, fmt.Sprintf("h%d.example:443", i), egressNotAllowed))
	}
	tests := []struct {
		name    string
		records []sandbox.Record
		where   []string
		want    []string // lines, exactly
	}{
		{name: "nothing refused", records: []sandbox.Record{allowed, {Event: "exit"}}, want: nil},
		{name: "telemetry hosts", where: []string{"in the journal (journalctl SODA_SANDBOX=run-1)"},
			records: []sandbox.Record{allowed,
				refusal(egress.KindConnect, "statsig.anthropic.com:443", egressNotAllowed),
				refusal(egress.KindConnect, "sentry.io:443", egressNotAllowed),
				refusal(egress.KindConnect, "statsig.anthropic.com:443", egressNotAllowed)},
			want: []string{
				"sodactl: egress: refused 3 connections to 2 hosts not in the allow-list: statsig.anthropic.com:443 (2 times), sentry.io:443; grant one with --allow HOST:PORT",
				"sodactl: egress: each attempt is in the journal (journalctl SODA_SANDBOX=run-1); -v shows them as they happen",
			}},
		{name: "other reasons", where: []string{"in /tmp/a.jsonl"},
			records: []sandbox.Record{
				refusal(egress.KindDNS, "example.com A", "dns is not available in the sandbox; use the proxy"),
				refusal(egress.KindConnect, "10.0.0.1:22", "private address 10.0.0.1"),
				refusal(egress.KindConnect, "x.example:443", egressNotAllowed)},
			want: []string{
				"sodactl: egress: refused 1 connection to 1 host not in the allow-list: x.example:443; grant one with --allow HOST:PORT",
				"sodactl: egress: refused 2 more attempts for other reasons: 10.0.0.1:22 (private address 10.0.0.1), DNS example.com A (dns is not available in the sandbox; use the proxy)",
				"sodactl: egress: each attempt is in /tmp/a.jsonl; -v shows them as they happen",
			}},
		{name: "many hosts, no sink", records: many,
			want: []string{
				"sodactl: egress: refused 7 connections to 7 hosts not in the allow-list: h0.example:443, h1.example:443, h2.example:443, h3.example:443, h4.example:443, and 2 more; grant one with --allow HOST:PORT",
				"sodactl: egress: each attempt is in the warnings above",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tally egressTally
			for _, r := range tt.records {
				tally.add(r)
			}
			var out bytes.Buffer
			tally.summary(&out, tt.where)
			var got []string
			if s := strings.TrimSuffix(out.String(), "\n"); s != "" {
				got = strings.Split(s, "\n")
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("summary:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
