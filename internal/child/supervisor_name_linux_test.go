package child

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/cgroup"
)

// TestSupervisorName: the supervisor shows up as soda-supervisor in ps
// and in systemd's logs, not as "exe".
func TestSupervisorName(t *testing.T) {
	p, err := Start(context.Background(), testLogger(t), cgroup.NewProcessGroupPlacer(), "sup-name", Spec{Supervise: true, Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(Grace{})
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.sup.cmd.Process.Pid) + "/comm")
	if got := strings.TrimSpace(string(b)); got != supComm {
		t.Errorf("supervisor comm %q, want %q", got, supComm)
	}
}
