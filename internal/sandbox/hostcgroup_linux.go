package sandbox

import (
	"fmt"
	"runtime"

	"github.com/soda-project/soda/internal/cgroup"
)

// SandboxParent is the cgroup directory that holds every sandbox's
// directory when soda makes them itself (no systemd): below the caller's
// own cgroup in each hierarchy, as systemd's soda-sandbox.slice holds
// their scopes. Its name cannot match the sweep's soda-sandbox- prefix.
const SandboxParent = "soda-sandbox.slice"

// sandboxParent is the parent of the sandboxes' cgroups on a host of ncpu
// CPUs: SandboxParent, with a collective CPU quota of the host's CPUs but
// one, as each sandbox's own by default (DefaultCPUPercent). It is
// written where the parent has no quota yet; one set already, by an
// operator, stays (cgroup.Parent).
func sandboxParent(ncpu int) cgroup.Parent {
	return cgroup.Parent{Name: SandboxParent, CPUQuota: DefaultCPUPercent(ncpu)}
}

// hostPlacer picks the sandbox's cgroup when systemd does not make it: a
// cgroup v2 directory below our own when that can enforce every limit;
// else, for root, directories in the cgroup v1 memory, pids and cpu
// hierarchies (plus a v2 directory on a hybrid host, so that the sandbox
// is still killed as a whole); else the v2 placer (or its error), which
// newGroup refuses, naming what it cannot enforce. An unprivileged caller
// cannot write the v1 hierarchies, and nothing delegates them: it keeps
// the refusal.
//
// Either way the directories are made in SandboxParent, which all the
// host's sandboxes share (sandboxParent).
func (sb *Sandbox) hostPlacer(root bool, limits cgroup.Limits) (cgroup.Placer, error) {
	parent := sandboxParent(runtime.NumCPU())
	v2, err := cgroup.NewCgroupPlacer("soda-sandbox", limits, parent)
	if err == nil && len(v2.Unenforced()) == 0 {
		return v2, nil
	}
	if !root {
		return v2, err
	}
	v1, err1 := cgroup.NewCgroup1Placer("soda-sandbox", limits, parent)
	if err1 != nil {
		sb.log.Debug("no cgroup v1 placement", "err", err1)
		if err != nil {
			return nil, fmt.Errorf("%w; cgroup v1: %w", err, err1)
		}
		return v2, nil
	}
	if err != nil || len(v1.Unenforced()) < len(v2.Unenforced()) {
		return v1, nil
	}
	return v2, nil
}

// v1Paths is what a cgroup v1 group says its member's /proc/PID/cgroup
// shows for each v1 controller (nil for any other group).
func v1Paths(g cgroup.Group) map[string]string {
	if v, ok := g.(interface{ V1Paths() map[string]string }); ok {
		return v.V1Paths()
	}
	return nil
}
