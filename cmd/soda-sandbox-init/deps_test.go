package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// hostSide are the packages of the host's side that init must not link:
// the one that starts sandboxes and egress's proxy; their subpackages
// (sandbox/wire, sandbox/protect, egress/relay) are shared on purpose.
var hostSide = []string{
	"github.com/soda-project/soda/internal/sandbox",
	"github.com/soda-project/soda/internal/egress",
}

// notInInit are packages (and everything below them) that init never uses.
var notInInit = []string{
	"github.com/soda-project/soda/internal/mcpbridge",
	"github.com/soda-project/soda/internal/httpfront",
	"github.com/soda-project/soda/internal/mcpd",
	"github.com/soda-project/soda/internal/child",
	"github.com/soda-project/soda/internal/cgroup",
	"github.com/modelcontextprotocol/go-sdk",
	"github.com/godbus/dbus",
	"github.com/coreos/go-systemd",
	// Init speaks no HTTP and no TLS (the host's proxy does): both are
	// megabytes of code that every sandbox start would load.
	"net/http",
	"crypto/tls",
}

// TestLinksOnlyWhatInitUses: the sandbox's PID 1 links none of the host
// side, the MCP bridge, its HTTP front, go-sdk, D-Bus and systemd clients,
// HTTP or TLS: every sandbox pays for what init loads, and init runs with the
// caller's privileges until it has confined itself. The non-standard
// dependencies are logged (go test -v).
func TestLinksOnlyWhatInitUses(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: no go tool in PATH to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	// Control: the list is the real one (init's own package is in it).
	if !slices.Contains(deps, "github.com/soda-project/soda/internal/sandboxinit") {
		t.Fatalf("go list -deps does not list internal/sandboxinit:\n%s", out)
	}
	var nonStd []string
	for _, d := range deps {
		if slices.Contains(hostSide, d) || slices.ContainsFunc(notInInit, func(p string) bool { return d == p || strings.HasPrefix(d, p+"/") }) {
			t.Errorf("soda-sandbox-init links %s", d)
		}
		if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") {
			nonStd = append(nonStd, d)
		}
	}
	t.Logf("non-standard dependencies of soda-sandbox-init:\n%s", strings.Join(nonStd, "\n"))
}

// TestSodactlDoesNotLinkInit: sodactl starts sandboxes through
// soda-sandbox-init and no longer carries the init side itself, nor the
// daemons' metrics library.
func TestSodactlDoesNotLinkInit(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: no go tool in PATH to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", "../sodactl").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, hostSide[0]) {
		t.Fatalf("control: sodactl does not link %s:\n%s", hostSide[0], out)
	}
	if slices.Contains(deps, "github.com/soda-project/soda/internal/sandboxinit") {
		t.Error("sodactl links internal/sandboxinit")
	}
	// Nor the Prometheus client, which only the daemons serve metrics
	// with: its package initialisation (registries, the Go and process
	// collectors, procfs) is a part of every sodactl start-up, 2-3 ms on
	// a machine where page faults are dear (docs/benchmarks.md).
	for _, d := range deps {
		if d == "github.com/prometheus/client_golang" || strings.HasPrefix(d, "github.com/prometheus/client_golang/") {
			t.Errorf("sodactl links %s", d)
		}
	}
}
