package sandbox

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/egress"
)

// netProbe prints the netns's sockets (/proc/net), its interfaces, the
// proxy variables, and whether 127.0.0.1:18080 accepts a connection.
const netProbe = `for f in tcp tcp6 udp udp6; do sed 1d /proc/net/$f | sed "s/^/$f /"; done
echo "links: $(ls /sys/class/net | tr '\n' ' ')"
env | grep -i '_proxy=' || true
if (exec 3<>/dev/tcp/127.0.0.1/18080) 2>/dev/null; then echo "connect: ok"; else echo "connect: refused"; fi`

// listeners returns the /proc/net lines of netProbe's output that are
// listening TCP sockets (state 0A) or bound UDP sockets.
func listeners(out string) []string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		switch f[0] {
		case "tcp", "tcp6":
			if f[4] == "0A" {
				l = append(l, line)
			}
		case "udp", "udp6":
			l = append(l, line)
		}
	}
	return l
}

// startProbe runs netProbe in a sandbox, checks the host side with check
// while it runs, and returns its output.
func startProbe(t *testing.T, noNetwork bool, check func(*Sandbox)) string {
	t.Helper()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	inR, inW, _ := os.Pipe() // the probe waits for stdin to close: check sees it alive
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	engine := testEngine(t, nil)
	sb, err := engine.Start(ctx, Spec{Argv: []string{"/bin/bash", "-c", netProbe + "\ncat >/dev/null"}, Home: t.TempDir(),
		NoNetwork: noNetwork, Stdin: inR, Stdout: outW, Stderr: os.Stderr, AllowDegraded: []Layer{LayerCgroup}})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		t.Fatalf("start: %v", err)
	}
	check(sb)
	inW.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(outR)
	if st, err := sb.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v, %v\n%s", st, err, out.String())
	}
	return out.String()
}

// TestNoNetwork: with Spec.NoNetwork the netns has only lo, nothing
// listens in it, 127.0.0.1:18080 refuses, no proxy variable is set, and
// the host runs no proxy. The same probe in the normal mode first shows
// what it detects (the relay's listeners, the proxy).
func TestNoNetwork(t *testing.T) {
	requireNamespaces(t)
	normal := startProbe(t, false, func(sb *Sandbox) {
		if sb.proxy == nil || sb.egress == nil {
			t.Error("normal mode: no proxy on the host")
		}
	})
	if l := listeners(normal); len(l) < 2 || !strings.Contains(normal, "connect: ok") || !strings.Contains(normal, "HTTPS_PROXY=") {
		t.Fatalf("control: the probe does not see the normal mode's relay (listeners %q):\n%s", l, normal)
	}

	closed := startProbe(t, true, func(sb *Sandbox) {
		if sb.proxy != nil || sb.egress != nil || sb.proxyDone != nil {
			t.Error("closed mode: the host runs a proxy or holds a control socket")
		}
		if err := sb.SetEgress(context.Background(), "test", []egress.Grant{{Host: "example.com", Port: 443}}, nil); err == nil {
			t.Error("closed mode: SetEgress succeeded")
		}
	})
	t.Logf("normal:\n%s\nclosed:\n%s", normal, closed)
	if l := listeners(closed); len(l) > 0 {
		t.Errorf("closed mode: sockets listening in the netns: %q", l)
	}
	for _, want := range []string{"links: lo \n", "connect: refused"} {
		if !strings.Contains(closed, want) {
			t.Errorf("closed mode: output lacks %q:\n%s", want, closed)
		}
	}
	if strings.Contains(strings.ToLower(closed), "_proxy=") {
		t.Errorf("closed mode: proxy variables set:\n%s", closed)
	}
}

func TestNoNetworkRefusesGrants(t *testing.T) {
	s := Spec{Argv: []string{"true"}, Home: t.TempDir(), NoNetwork: true, Egress: egress.Policy{MCPPorts: []uint16{4000}}}
	if err := s.Normalize(); err == nil || !strings.Contains(err.Error(), "no network") {
		t.Fatalf("Normalize = %v, want a refusal", err)
	}
}
