package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// TestSetEgressAtRunTime: a command in a live sandbox asks the proxy for a
// host target again and again; it is refused before the grant, let
// through once SetEgress grants it, refused again once it is revoked, and
// each change is on the audit trail with who asked.
func TestSetEgressAtRunTime(t *testing.T) {
	requireNamespaces(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// One CONNECT per line read from stdin; the reply's status line out.
	script := fmt.Sprintf(`while read -r _; do
  if exec 3<>/dev/tcp/127.0.0.1/%d; then
    printf 'CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n' >&3
    IFS= read -r line <&3; echo "${line%%$'\r'}"; exec 3>&-
  else echo "no proxy"; fi
done`, egress.DefaultProxyPort, port)

	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer inW.Close()
	defer outR.Close()
	var mu sync.Mutex
	var recs []Record
	eng := testEngine(t, func(c *Config) { c.Audit = func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() } })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := eng.Start(ctx, Spec{Argv: []string{"/bin/bash", "-c", script}, Home: t.TempDir(),
		Stdin: inR, Stdout: outW, Stderr: os.Stderr, AllowDegraded: []Layer{LayerCgroup}})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	out := bufio.NewScanner(outR)
	try := func(want string) {
		t.Helper()
		if _, err := inW.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("no reply line (%v)", out.Err())
		}
		if got := out.Text(); !strings.Contains(got, want) {
			t.Fatalf("CONNECT 127.0.0.1:%d: %q, want %q", port, got, want)
		}
	}
	g := egress.Grant{Host: "127.0.0.1", Port: uint16(port), Private: true}
	try(" 403 ")
	if err := sb.SetEgress(ctx, "test-operator", []egress.Grant{g}, nil); err != nil {
		t.Fatalf("grant: %v", err)
	}
	try(" 200 ")
	if err := sb.SetEgress(ctx, "test-operator", nil, []egress.Grant{g}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	try(" 403 ")
	if err := sb.SetEgress(ctx, "test-operator", nil, []egress.Grant{g}); err == nil {
		t.Error("revoking a grant not in force succeeded")
	}
	inW.Close()
	if st, err := sb.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v, %v", st, err)
	}
	if err := sb.SetEgress(ctx, "test-operator", []egress.Grant{g}, nil); err == nil {
		t.Error("SetEgress on an ended sandbox succeeded")
	}

	mu.Lock()
	defer mu.Unlock()
	var changes, decisions []string
	for _, r := range recs {
		switch r.Event {
		case "grant", "revoke":
			if r.By != "test-operator" || len(r.Grants) != 1 || !strings.Contains(r.Grants[0], fmt.Sprintf("127.0.0.1:%d", port)) {
				t.Errorf("%s record lacks its target or who asked: %+v", r.Event, r)
			}
			changes = append(changes, r.Event)
		case "egress":
			if r.Egress.Reason != "connected" {
				decisions = append(decisions, r.Egress.Decision)
			}
		}
	}
	if strings.Join(changes, ",") != "grant,revoke" {
		t.Errorf("audited changes = %v, want grant, revoke", changes)
	}
	// An attempt's record is made when it ends, which may be after the
	// next change: the decisions are counted, not ordered.
	slices.Sort(decisions)
	if strings.Join(decisions, ",") != "allow,deny,deny" {
		t.Errorf("audited decisions = %v, want one allow and two deny", decisions)
	}
}
