package systemd

import (
	"context"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// UnitState is what systemctl status shows of a unit.
type UnitState struct {
	// Active is ActiveState/SubState, e.g. "active/listening".
	Active string
	// Status is the service's STATUS= text, if any.
	Status string
	// MainPID is the service's main process, 0 if none.
	MainPID uint32
}

// UnitStates asks systemd over D-Bus for the state of units. It fails when
// systemd is not the service manager (no system bus).
func UnitStates(ctx context.Context, units []string) (map[string]UnitState, error) {
	conn, err := sdbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	out := make(map[string]UnitState, len(units))
	for _, u := range units {
		props, err := conn.GetUnitPropertiesContext(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("unit %s: %w", u, err)
		}
		st := UnitState{Active: fmt.Sprintf("%v/%v", props["ActiveState"], props["SubState"])}
		if len(u) > 8 && u[len(u)-8:] == ".service" {
			if p, err := conn.GetUnitTypePropertiesContext(ctx, u, "Service"); err == nil {
				if s, ok := p["StatusText"].(string); ok {
					st.Status = s
				}
				if pid, ok := p["MainPID"].(uint32); ok {
					st.MainPID = pid
				}
			}
		}
		out[u] = st
	}
	return out, nil
}

// RestartPending reports whether the service this process runs in is
// being restarted (a restart job of its unit is running: systemctl
// restart), as opposed to stopped. It fails when the process runs in no
// service or systemd cannot be asked.
func RestartPending(ctx context.Context, pid int) (bool, error) {
	conn, err := sdbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return false, fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	unit, err := conn.GetUnitNameByPID(ctx, uint32(pid))
	if err != nil {
		return false, fmt.Errorf("unit of pid %d: %w", pid, err)
	}
	jobs, err := conn.ListJobsContext(ctx)
	if err != nil {
		return false, fmt.Errorf("list jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Unit == unit && (j.JobType == "restart" || j.JobType == "try-restart" || j.JobType == "reload-or-restart") {
			return true, nil
		}
	}
	return false, nil
}
