package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanLinks: the lean sodactl (-tags soda_lean) links none of the
// modules it hands off for, whose initialisation every run would pay; the
// full one, the control, links each of them.
func TestLeanLinks(t *testing.T) {
	heavy := []string{
		"github.com/modelcontextprotocol/go-sdk/",
		"github.com/google/go-containerregistry/",
		"github.com/prometheus/",
	}
	deps := func(tags ...string) string {
		out, err := exec.Command("go", append(append([]string{"list"}, tags...), "-deps", ".")...).Output()
		if err != nil {
			t.Fatalf("go list %v: %v", tags, err)
		}
		return string(out)
	}
	lean, full := deps("-tags", "soda_lean"), deps()
	for _, m := range heavy {
		if !strings.Contains(full, "\n"+m) {
			t.Errorf("the full sodactl does not link %s: the control failed, update this test", m)
		}
		if strings.Contains(lean, "\n"+m) {
			t.Errorf("the lean sodactl links %s", m)
		}
	}
}
