package child

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/soda-project/soda/internal/cgroup"
)

// ledgerRecord is one child's record.
type ledgerRecord struct {
	ID        string `json:"id"`
	Group     string `json:"group"`            // Group.String()
	Cgroup    string `json:"cgroup,omitempty"` // directory in the cgroup file system
	Unit      string `json:"unit,omitempty"`   // transient scope
	Pgid      int    `json:"pgid"`
	Pid       int    `json:"pid"`
	PidStart  uint64 `json:"pid_start"`
	SupPid    int    `json:"supervisor_pid,omitempty"`
	SupStart  uint64 `json:"supervisor_start,omitempty"`
	Owner     int    `json:"owner_pid"`
	OwnerStrt uint64 `json:"owner_start"`
	Started   string `json:"started"`
}

// OpenLedger opens (creating it, mode 0700) the ledger in dir.
func OpenLedger(dir string) (*Ledger, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("child ledger: %w", err)
	}
	st, err := readProcStat(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("child ledger: own start time: %w", err)
	}
	return &Ledger{dir: dir, ownerStart: st.startTime}, nil
}

// Dir returns the ledger's directory.
func (l *Ledger) Dir() string { return l.dir }

// Close removes the ledger's directory when it holds no record, so that
// a clean stop leaves nothing behind. A directory that still holds
// records (a child whose group could not be emptied, or the children of
// another live instance sharing it) is kept for the next Recover.
func (l *Ledger) Close() error {
	err := os.Remove(l.dir)
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return nil
	default:
		return fmt.Errorf("remove child ledger %s: %w", l.dir, err)
	}
}

func (l *Ledger) path(id string) string { return filepath.Join(l.dir, id+".json") }

// add records p, which has just started.
func (l *Ledger) add(p *Process) error {
	r := ledgerRecord{ID: p.id, Group: p.group.String(), Pgid: p.pid, Pid: p.pid,
		Owner: os.Getpid(), OwnerStrt: l.ownerStart, Started: time.Now().UTC().Format(time.RFC3339)}
	if st, err := readProcStat(p.pid); err == nil {
		r.PidStart = st.startTime
	}
	if d, ok := p.group.(cgroup.DirGroup); ok {
		r.Cgroup = d.CgroupDir()
	}
	if g, ok := p.group.(cgroup.HandoverGroup); ok { // a scope
		r.Unit = g.Unit()
	}
	if p.sup != nil {
		r.SupPid = p.sup.cmd.Process.Pid
		if st, err := readProcStat(r.SupPid); err == nil {
			r.SupStart = st.startTime
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// Another instance sharing the directory may have removed it empty
	// (Close) since this one opened it.
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("child ledger: %w", err)
	}
	tmp := l.path(p.id) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, l.path(p.id)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// remove deletes p's record.
func (l *Ledger) remove(p *Process) {
	_ = os.Remove(l.path(p.id))
}

// sameProcess reports whether pid still is the process that started at
// start (clock ticks after boot).
func sameProcess(pid int, start uint64) bool {
	if pid <= 0 || start == 0 {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && st.startTime == start && st.state != 'Z'
}

// Recover kills what is left of every child recorded by a process that no
// longer runs, logs each, and removes their records. Records of a live
// owner (another instance sharing the directory) are left alone. scopes,
// if not nil, stops recorded transient scopes (systemd placer). It returns
// how many processes it killed.
func (l *Ledger) Recover(ctx context.Context, log *slog.Logger, scopes *cgroup.ScopePlacer) (int, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return 0, fmt.Errorf("read child ledger %s: %w", l.dir, err)
	}
	total := 0
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(l.dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(l.dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r ledgerRecord
		if err := json.Unmarshal(b, &r); err != nil {
			log.Warn("child ledger: removing unreadable record", "file", path, "err", err)
			os.Remove(path)
			continue
		}
		if r.Owner == os.Getpid() && r.OwnerStrt == l.ownerStart {
			continue // ours
		}
		if sameProcess(r.Owner, r.OwnerStrt) {
			log.Info("child ledger: record belongs to a running process, left alone", "file", path, "owner_pid", r.Owner)
			continue
		}
		n, err := recoverRecord(ctx, r, scopes)
		total += n
		attrs := []any{"child", r.ID, "group", r.Group, "pid", r.Pid, "owner_pid", r.Owner, "started", r.Started, "killed", n}
		if err != nil {
			log.Warn("child ledger: could not clean up after a previous run", append(attrs, "err", err)...)
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			log.Warn("child ledger: killed processes a previous run left behind", attrs...)
		} else {
			log.Info("child ledger: record of a previous run, nothing left", attrs...)
		}
		os.Remove(path)
	}
	return total, errors.Join(errs...)
}

// recoverRecord kills what is left of one recorded child.
func recoverRecord(ctx context.Context, r ledgerRecord, scopes *cgroup.ScopePlacer) (int, error) {
	killed := map[int]bool{}
	kill := func(pid int) {
		if pid > 0 && pid != os.Getpid() && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed[pid] = true
		}
	}
	// Its supervisor first, so that it does not start anything more.
	if sameProcess(r.SupPid, r.SupStart) {
		kill(r.SupPid)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		left := 0
		if r.Cgroup != "" {
			left += killCgroupDir(r.Cgroup, kill)
		}
		// The process group: its leader if it is still the same process,
		// else the members that started after it (older ones cannot
		// belong to it: the pgid is the leader's pid). A live process
		// with the leader's pid number is another process that reuses
		// it, and its group a new one: the kernel does not hand out a
		// pid still used as a process group ID, so while the old group
		// had members left, its number could not have been reused.
		if sameProcess(r.Pgid, r.PidStart) {
			if syscall.Kill(-r.Pgid, syscall.SIGKILL) == nil {
				killed[r.Pgid] = true
			}
			left++
		} else if r.Pgid > 0 && r.PidStart > 0 && groupStillOurs(r.Pgid, r.PidStart) {
			for _, pid := range pgidMembers(r.Pgid, r.PidStart) {
				kill(pid)
				left++
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("%s: processes left after kill: %w", r.Group, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	var errs []error
	if r.Unit != "" && scopes != nil {
		if err := scopes.StopUnit(ctx, r.Unit); err != nil {
			errs = append(errs, err)
		}
	} else if r.Cgroup != "" && r.Unit == "" {
		if err := os.Remove(r.Cgroup); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", r.Cgroup, err))
		}
	}
	return len(killed), errors.Join(errs...)
}

// groupStillOurs reports whether process group pgid can still be the one
// whose leader started at start: no process has the leader's pid any
// more, or the one that has it is that leader, a zombie.
func groupStillOurs(pgid int, start uint64) bool {
	st, err := readProcStat(pgid)
	if err != nil {
		return true // the number is free: members left with it are the old group's
	}
	return st.startTime == start
}

// pgidMembers lists the live processes in process group pgid that started
// no earlier than start.
func pgidMembers(pgid int, start uint64) []int {
	return procsWhere(func(st procStat) bool { return st.pgid == pgid && st.startTime >= start })
}
