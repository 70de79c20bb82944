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

// egressTracked bounds the distinct targets a tally names, for each kind
// of refusal: an agent that tries a million names costs sodactl, on the
// host, a bounded map; attempts to further targets are counted, not
// named.
const egressTracked = 1024

// egressTally counts the egress attempts a run's proxy refused, so that
// sodactl run says once, at the end, what was refused and what to do,
// instead of a warning per connection (an agent's own telemetry hosts
// are refused at every run). The audit sinks keep every attempt. Safe
// for concurrent use.
type egressTally struct {
	mu         sync.Mutex
	notAllowed refusals // no grant covers the target
	other      refusals // refused for another reason
}

// refusals counts refused attempts by target, at most egressTracked
// targets of them.
type refusals struct {
	counts    map[string]int    // target -> refusals
	reasons   map[string]string // target -> its first reason (other refusals)
	untracked int               // attempts to targets past egressTracked
}

// add counts one attempt to target, refused for reason ("" to keep none).
func (r *refusals) add(target, reason string) {
	if r.counts == nil {
		r.counts, r.reasons = map[string]int{}, map[string]string{}
	}
	if _, ok := r.counts[target]; !ok {
		if len(r.counts) >= egressTracked {
			r.untracked++
			return
		}
		if reason != "" {
			r.reasons[target] = reason
		}
	}
	r.counts[target]++
}

// total is how many attempts r counts.
func (r *refusals) total() int {
	n := r.untracked
	for _, c := range r.counts {
		n += c
	}
	return n
}

// targets is "N hosts", or "more than N hosts" when some were not named.
func (r *refusals) targets() string {
	if r.untracked > 0 {
		return "more than " + plural(len(r.counts), "host")
	}
	return plural(len(r.counts), "host")
}

// list names the targets, most refused first, each with its count when
// above one and its reason when it has one, at most egressListed of them.
func (r *refusals) list() string {
	targets := make([]string, 0, len(r.counts))
	for k := range r.counts {
		targets = append(targets, k)
	}
	slices.SortFunc(targets, func(a, b string) int {
		return cmp.Or(cmp.Compare(r.counts[b], r.counts[a]), strings.Compare(a, b))
	})
	var parts []string
	for i, k := range targets {
		if i == egressListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(targets)-i))
			break
		}
		var notes []string
		if r.counts[k] > 1 {
			notes = append(notes, fmt.Sprintf("%d times", r.counts[k]))
		}
		if why := r.reasons[k]; why != "" {
			notes = append(notes, why)
		}
		if len(notes) > 0 {
			k += " (" + strings.Join(notes, ", ") + ")"
		}
		parts = append(parts, k)
	}
	if r.untracked > 0 {
		parts = append(parts, fmt.Sprintf("and %s to targets not named", plural(r.untracked, "attempt")))
	}
	return strings.Join(parts, ", ")
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
		t.notAllowed.add(target, "")
		return
	}
	t.other.add(target, ev.Reason)
}

// summary writes what was refused to w, a line for the targets outside
// the allow-list and one for other refusals, then where each attempt is
// recorded (auditWhere; none: the warnings above); nothing when nothing
// was refused.
func (t *egressTally) summary(w io.Writer, where []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	na, ot := t.notAllowed.total(), t.other.total()
	if na == 0 && ot == 0 {
		return
	}
	if na > 0 {
		fmt.Fprintf(w, "sodactl: egress: refused %s to %s not in the allow-list: %s; grant one with --allow HOST:PORT\n",
			plural(na, "connection"), t.notAllowed.targets(), t.notAllowed.list())
	}
	if ot > 0 {
		fmt.Fprintf(w, "sodactl: egress: refused %s for other reasons: %s\n", plural(ot, "more attempt"), t.other.list())
	}
	if len(where) == 0 {
		fmt.Fprintln(w, "sodactl: egress: each attempt is in the warnings above")
		return
	}
	fmt.Fprintf(w, "sodactl: egress: each attempt is %s; -v shows them as they happen\n", strings.Join(where, " and "))
}

// plural is "1 host" or "N hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
