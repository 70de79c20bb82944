package cgroup

import (
	"strings"
	"testing"
)

func TestGateStripEnv(t *testing.T) {
	got := gateStripEnv([]string{"A=1", "SODA_CHILD_GATE=1", "SODA_CHILD_GATEWAY=x", "B=2"})
	if want := "A=1 SODA_CHILD_GATEWAY=x B=2"; strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestIsGateNeedsBothMarkers(t *testing.T) {
	// This process has neither marker.
	if IsGate() {
		t.Fatal("test process reports being a gate")
	}
	t.Setenv(gateEnv, "1")
	if IsGate() {
		t.Error("the environment marker alone made this process a gate")
	}
}
