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
	// An agent that tries more names than a tally keeps: the host keeps
	// egressTracked of them and counts the rest.
	var flood []sandbox.Record
	for i := range egressTracked + 3 {
		flood = append(flood, refusal(egress.KindConnect, fmt.Sprintf("f%05d.example:443", i), egressNotAllowed))
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
		{name: "more names than kept", records: flood, where: []string{"in /tmp/a.jsonl"},
			want: []string{
				fmt.Sprintf("sodactl: egress: refused %d connections to more than %d hosts not in the allow-list: f00000.example:443, f00001.example:443, f00002.example:443, f00003.example:443, f00004.example:443, and %d more, and 3 attempts to targets not named; grant one with --allow HOST:PORT", egressTracked+3, egressTracked, egressTracked-5),
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

// TestEgressTallyBounded: however many distinct targets an agent tries, a
// tally keeps at most egressTracked of them for each kind of refusal.
func TestEgressTallyBounded(t *testing.T) {
	var tally egressTally
	for i := range 4 * egressTracked {
		tally.add(refusal(egress.KindConnect, fmt.Sprintf("h%d.example:443", i), egressNotAllowed))
		tally.add(refusal(egress.KindConnect, fmt.Sprintf("10.0.%d.%d:22", i/256, i%256), "private address"))
	}
	for _, r := range []*refusals{&tally.notAllowed, &tally.other} {
		if len(r.counts) != egressTracked || len(r.reasons) > egressTracked || r.untracked != 3*egressTracked || r.total() != 4*egressTracked {
			t.Errorf("kept %d targets and %d reasons, %d untracked, %d in all; want %d kept, %d untracked, %d in all",
				len(r.counts), len(r.reasons), r.untracked, r.total(), egressTracked, 3*egressTracked, 4*egressTracked)
		}
	}
}
