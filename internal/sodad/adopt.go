package sodad

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/soda-project/soda/internal/auditsink"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/systemd"
)

// Restarts. Each sandbox's host-side descriptors go to systemd's file
// descriptor store when it starts (storeHandover), named ID.PART, and its
// state record holds the rest (Record.Handover). A successor gets the
// descriptors back at its start and adopts every recorded sandbox whose
// init still runs (recover); a restart (systemctl restart) hands the live
// sandboxes over (drain), a crash leaves them to the successor anyway.
// A sandbox whose descriptors are not there (it ended meanwhile, or they
// could not be stored) is ended and its record says why; when no
// successor comes (systemctl stop, or the unit gives up restarting), the
// store is emptied, each init sees its life socket close, and the
// sandboxes end by themselves.

// storeHandover puts copies of b's descriptors in the fd store. A failure
// is logged: the sandbox runs, but a restart of sodad will end it.
func (d *Daemon) storeHandover(b *box) {
	if !d.cfg.FDStore.Available() {
		return
	}
	if b.keys != nil || b.releaseImage != nil {
		// Its keys (gateway, terminator) and its image's lease live in
		// this process: a successor could not serve or hold them.
		d.log.Debug("sandbox with the profile's keys or image: a restart of sodad will end it", "sandbox", b.id)
		return
	}
	if b.perRun {
		// Its life fd (the caller running its servers) is not handed
		// over: a successor could not tell when they are gone.
		d.log.Debug("sandbox with per-run MCP servers: a restart of sodad will end it", "sandbox", b.id)
		return
	}
	_, files, err := b.sb.Handover()
	if errors.Is(err, sandbox.ErrLiveNotHandable) {
		d.log.Debug("persistent sandbox: a restart of sodad will end it", "sandbox", b.id)
		return
	}
	if err != nil {
		d.log.Warn("sandbox cannot be handed over: a restart of sodad will end it", "sandbox", b.id, "err", err)
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	parts := make([]string, 0, len(files))
	for part := range files {
		parts = append(parts, part)
	}
	sort.Strings(parts)
	var names []string
	for _, part := range parts {
		name := b.id + "." + part
		if err := d.cfg.FDStore.Store(name, files[part]); err != nil {
			d.log.Warn("sandbox cannot be handed over: a restart of sodad will end it", "sandbox", b.id, "err", err)
			for _, n := range names {
				_ = d.cfg.FDStore.Remove(n)
			}
			return
		}
		names = append(names, name)
	}
	b.mu.Lock()
	b.stored = names
	b.mu.Unlock()
}

// unstore drops b's descriptors from the fd store (it has ended).
func (d *Daemon) unstore(b *box) {
	b.mu.Lock()
	names := b.stored
	b.stored = nil
	b.mu.Unlock()
	for _, n := range names {
		if err := d.cfg.FDStore.Remove(n); err != nil {
			d.log.Warn("remove a sandbox's descriptors from the fd store", "name", n, "err", err)
		}
	}
}

// recover takes over what a previous sodad left: it adopts each recorded
// sandbox whose descriptors came back and whose init still runs, and ends
// the rest: their scopes (SweepLeftovers stops those whose owner lock is
// free, then each recorded unit still active), their records (each logged
// with its outcome, then removed), their homes and stray descriptors.
func (d *Daemon) recover(ctx context.Context) {
	stored := map[string]map[string]*os.File{}
	for name, files := range d.cfg.Stored {
		id, part, ok := strings.Cut(name, ".")
		if !ok || len(files) != 1 || !validID(id) {
			d.log.Warn("unknown descriptor in the fd store dropped", "name", name)
			for _, f := range files {
				f.Close()
			}
			_ = d.cfg.FDStore.Remove(name)
			continue
		}
		if stored[id] == nil {
			stored[id] = map[string]*os.File{}
		}
		stored[id][part] = files[0]
	}
	d.cfg.Stored = nil

	recs, errs := d.store.List()
	for _, err := range errs {
		d.log.Error("unreadable state record removed", "err", err)
		var re *RecordError
		if errors.As(err, &re) {
			_ = d.store.Remove(re.ID)
		}
	}
	var lost []Record
	for _, r := range recs {
		files := stored[r.ID]
		delete(stored, r.ID)
		if r.Handover == nil || files == nil {
			lost = append(lost, r)
			d.unstoreNames(r.ID, files)
			continue
		}
		if err := d.adopt(ctx, r, files); err != nil {
			d.log.Warn("previous sandbox not adopted", "sandbox", r.ID, "err", err)
			d.unstoreNames(r.ID, files)
			r.Supervisor = -1 // ended while no sodad ran, or unadoptable
			lost = append(lost, r)
		}
	}
	for id, files := range stored {
		d.log.Warn("descriptors of an unrecorded sandbox dropped", "sandbox", id)
		d.unstoreNames(id, files)
	}

	removed, err := d.engine.SweepLeftovers(ctx)
	if err != nil {
		d.log.Warn("remove what killed sandboxes left", "removed", removed, "err", err)
	} else if len(removed) > 0 {
		d.log.Info("removed what killed sandboxes left", "removed", removed)
	}
	d.endLost(ctx, lost)
	if n := d.homes.Sweep(d.log); n > 0 {
		d.log.Info("removed the homes of previous sandboxes", "count", n)
	}
}

// unstoreNames closes files (a sandbox's descriptors, by part) and drops
// them from the fd store.
func (d *Daemon) unstoreNames(id string, files map[string]*os.File) {
	for part, f := range files {
		f.Close()
		_ = d.cfg.FDStore.Remove(id + "." + part)
	}
}

// endLost makes sure the sandboxes of recs, which no sodad supervises,
// are gone: each unit still active is stopped; each is logged with its
// outcome and its record removed.
func (d *Daemon) endLost(ctx context.Context, recs []Record) {
	var units []string
	for _, r := range recs {
		units = append(units, r.Unit)
	}
	states := map[string]systemd.UnitState{}
	if len(units) > 0 {
		if s, err := systemd.UnitStates(ctx, units); err == nil {
			states = s
		} else {
			d.log.Warn("state of the previous sandboxes' units", "err", err)
		}
	}
	for _, r := range recs {
		st := states[r.Unit].Active
		outcome := "ended: sodad restarted"
		switch {
		case r.Supervisor == -1:
			outcome = "ended while sodad was restarting"
		case r.Handover == nil:
			outcome = "ended: sodad restarted, and it could not be handed over"
		}
		if strings.HasPrefix(st, "active") || strings.HasPrefix(st, "deactivating") {
			// Nothing supervises its egress any more: it is stopped.
			if err := stopUnit(ctx, r.Unit); err != nil {
				d.log.Error("stop a previous sandbox's unit", "sandbox", r.ID, "unit", r.Unit, "err", err)
				outcome += " (its unit could not be stopped: " + err.Error() + ")"
			}
		}
		d.journal.Warn("sandbox "+outcome, "sandbox", r.ID, "owner_uid", r.OwnerUID, "profile", r.Profile, "unit", r.Unit,
			"result", "supervisor-lost")
		if err := d.store.Remove(r.ID); err != nil {
			d.log.Error("remove state record", "err", err)
		}
	}
}

// adopt takes over the sandbox of r with its stored descriptors files
// (which it owns from now on) and puts it back on the bus.
func (d *Daemon) adopt(ctx context.Context, r Record, files map[string]*os.File) error {
	b := &box{d: d, id: r.ID, path: sodadapi.SandboxPath(r.ID), owner: r.OwnerUID, profile: r.Profile, unit: r.Unit,
		created: r.Created, argv: r.Argv, audit: newAuditRing(auditKeep),
		alog: auditsink.NewLog(d.journal.With("owner_uid", r.OwnerUID)), noNetwork: r.NoNetwork,
		mcp: slices.Clone(r.MCP), rw: r.ReadWrite, ro: r.ReadOnly, limits: r.Limits}
	for _, list := range []struct {
		in  []string
		out *[]egress.Grant
	}{{r.Allow, &b.allow}, {r.AllowPrivate, &b.allowPrivate}} {
		for _, s := range list.in {
			g, err := egress.ParseGrant(s, list.out == &b.allowPrivate)
			if err != nil {
				return err
			}
			*list.out = append(*list.out, g)
		}
	}
	d.mu.Lock()
	d.boxes[b.id] = b // the engine's audit records find it
	d.mu.Unlock()
	names := make([]string, 0, len(files))
	for part := range files {
		names = append(names, b.id+"."+part)
	}
	sb, err := d.engine.Adopt(ctx, *r.Handover, files)
	if err != nil {
		d.mu.Lock()
		delete(d.boxes, b.id)
		d.mu.Unlock()
		return err
	}
	eff := profile.Request{ReadWrite: r.ReadWrite, ReadOnly: r.ReadOnly, NoNetwork: r.NoNetwork}
	if err := b.export(d.conn, b.propMap(eff, r.Limits)); err != nil {
		sb.Stop()
		_, _ = sb.Wait(ctx)
		d.mu.Lock()
		delete(d.boxes, b.id)
		d.mu.Unlock()
		return err
	}
	b.mu.Lock()
	b.sb, b.stored = sb, names
	b.mu.Unlock()
	r.Supervisor = os.Getpid()
	if err := d.store.Write(b.record()); err != nil {
		d.log.Error("state record", "err", err)
	}
	d.live.Add(1)
	b.props.SetMust(sodadapi.SandboxInterface, "State", "running")
	d.journal.Info("sandbox adopted: sodad restarted, the sandbox runs on", "sandbox", b.id, "owner_uid", b.owner, "profile", b.profile, "unit", b.unit)
	go b.wait()
	return nil
}

// sandboxDetached reports whether err is Wait's for a handed-over sandbox.
func sandboxDetached(err error) bool { return errors.Is(err, sandbox.ErrDetached) }
