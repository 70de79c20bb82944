package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
)

// TestEgressNotAllowedIsTheProxysReason: the summary's allow-list line
// counts what the proxy really says of a target no grant covers.
func TestEgressNotAllowedIsTheProxysReason(t *testing.T) {
	events := make(chan egress.Event, 4)
	p := &egress.Proxy{Audit: func(ev egress.Event) { events <- ev }}
	c, s := net.Pipe()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go p.ServeConn(ctx, s, egress.DefaultProxyPort)
	go fmt.Fprint(c, "CONNECT telemetry.example:443 HTTP/1.1\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "403") {
		t.Fatalf("proxy answered %q, %v; want 403", line, err)
	}
	select {
	case ev := <-events:
		var tally egressTally
		tally.add(sandbox.Record{Event: "egress", Egress: &ev})
		var out bytes.Buffer
		tally.summary(&out, nil)
		if !strings.Contains(out.String(), "1 host not in the allow-list: telemetry.example:443") {
			t.Errorf("event %+v summed up as:\n%s", ev, out.String())
		}
	case <-ctx.Done():
		t.Fatal("no audit event")
	}
}
