package sandboxtest

import (
	"fmt"
	"strings"
	"testing"
)

// asEach runs f as root and as the test user, with the arguments every
// run of that user needs (an ordinary user waives the cgroup layer on this
// hybrid host: see runBattery).
func asEach(t *testing.T, f func(t *testing.T, user, who string, pre []string)) {
	for _, user := range []string{"", testUser} {
		who, pre := "root", []string(nil)
		if user != "" {
			who, pre = user, []string{"--allow-degraded", "cgroup"}
		}
		t.Run(who, func(t *testing.T) { f(t, user, who, pre) })
	}
}

// TestPlantedLinkGrant: an agent plants rootlink -> /root in its
// workspace; a later run that grants ws/rootlink must be refused, naming
// the link and its target, instead of mounting /root.
func TestPlantedLinkGrant(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		ws := e.bin + "/ws-link-" + who
		if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s && chown %[2]s %[1]s", ws, who)); r.err != nil {
			t.Fatal(r)
		}
		// Run 1: the agent plants the link.
		if r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--", "ln", "-s", "/root", ws+"/rootlink")...); r.err != nil {
			t.Fatalf("plant the link: %s", r)
		}
		// Run 2: the user grants what looks like a workspace directory.
		marker := "/root/soda-link-marker"
		e.exec(execOpts{}, "rm", "-f", marker)
		r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws+"/rootlink", "--", "touch", ws+"/rootlink/soda-link-marker")...)
		if r.code != 125 || !strings.Contains(r.stderr, ws+"/rootlink is a symbolic link to /root") {
			t.Errorf("grant through a planted link: want exit 125 naming the link and its target: %s", r)
		}
		if c := e.exec(execOpts{}, "ls", marker); c.err == nil {
			t.Errorf("the run wrote %s through the link", marker)
		}
		e.noLeftovers(t)
	})
}
