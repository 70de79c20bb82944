package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
)

// egressNotAllowed is the proxy's reason for a target that no grant
// covers (egress.Proxy), the refusal a user answers with --allow.
const egressNotAllowed = "not in allow list"

// egressListed is how many targets a summary line names.
const egressListed = 5

// egressTally counts the egress attempts a run's proxy refused, so that
// sodactl run says once, at the end, what was refused and what to do,
// instead of a warning per connection (an agent's own telemetry hosts
// are refused at every run). The audit sinks keep every attempt. Safe
// for concurrent use.
type egressTally struct {
	mu         sync.Mutex
	notAllowed map[string]int    // target -> refusals
	other      map[string]int    // target -> refusals for another reason
	reasons    map[string]string // target -> the first other reason
}

// add counts r when it is a refused egress attempt.
func (t *egressTally) add(r sandbox.Record) {
	if r.Event != "egress" || r.Egress == nil || r.Egress.Decision != egress.DecisionDeny {
		return
	}
	ev := r.Egress
	target := ev.Target
	if ev.Kind == egress.KindDNS {
		target = "DNS " + target
	}
	if target == "" {
		target = fmt.Sprintf("port %d", ev.Port)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Reason == egressNotAllowed {
		if t.notAllowed == nil {
			t.notAllowed = map[string]int{}
		}
		t.notAllowed[target]++
		return
	}
	if t.other == nil {
		t.other, t.reasons = map[string]int{}, map[string]string{}
	}
	if t.other[target] == 0 {
		t.reasons[target] = ev.Reason
	}
	t.other[target]++
}

// summary writes what was refused to w, a line for the targets outside
// the allow-list and one for other refusals, then where each attempt is
// recorded (auditWhere; none: the warnings above); nothing when nothing
// was refused.
func (t *egressTally) summary(w io.Writer, where []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.notAllowed) == 0 && len(t.other) == 0 {
		return
	}
	if n := total(t.notAllowed); n > 0 {
		fmt.Fprintf(w, "sodactl: egress: refused %s to %s not in the allow-list: %s; grant one with --allow HOST:PORT\n",
			plural(n, "connection"), plural(len(t.notAllowed), "host"), listTargets(t.notAllowed, nil))
	}
	if n := total(t.other); n > 0 {
		fmt.Fprintf(w, "sodactl: egress: refused %s for other reasons: %s\n", plural(n, "more attempt"), listTargets(t.other, t.reasons))
	}
	if len(where) == 0 {
		fmt.Fprintln(w, "sodactl: egress: each attempt is in the warnings above")
		return
	}
	fmt.Fprintf(w, "sodactl: egress: each attempt is %s; -v shows them as they happen\n", strings.Join(where, " and "))
}

// listTargets names the targets of counts, most refused first, each with
// its count when above one and its reason when reasons has one, at most
// egressListed of them.
func listTargets(counts map[string]int, reasons map[string]string) string {
	targets := make([]string, 0, len(counts))
	for k := range counts {
		targets = append(targets, k)
	}
	slices.SortFunc(targets, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	var parts []string
	for i, k := range targets {
		if i == egressListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(targets)-i))
			break
		}
		var notes []string
		if counts[k] > 1 {
			notes = append(notes, fmt.Sprintf("%d times", counts[k]))
		}
		if r := reasons[k]; r != "" {
			notes = append(notes, r)
		}
		if len(notes) > 0 {
			k += " (" + strings.Join(notes, ", ") + ")"
		}
		parts = append(parts, k)
	}
	return strings.Join(parts, ", ")
}

func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// plural is "1 host" or "N hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
