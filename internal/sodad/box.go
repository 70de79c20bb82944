package sodad

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"

	"github.com/soda-project/soda/internal/auditsink"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostkeys"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/workhome"
)

// box is one sandbox and its object on the bus.
type box struct {
	d       *Daemon
	id      string
	path    dbus.ObjectPath
	owner   uint32
	profile string
	unit    string
	created time.Time
	argv    []string

	sb    *sandbox.Sandbox
	props *prop.Properties
	audit *auditRing
	alog  *auditsink.Log
	files []*os.File
	// perRun: the sandbox has the caller's per-run MCP servers (RunMCP),
	// which end with the caller; a restart of sodad ends it.
	perRun bool
	home   *workhome.Home
	// keys: the profile's [Keys] started for the sandbox (its model
	// gateway, its TLS terminator), held by this sodad; a restart of
	// sodad ends the sandbox.
	keys *hostkeys.Keys
	// image is the profile's Image= the sandbox runs on; releaseImage
	// ends this sodad's lease on it (nil: none).
	image        string
	releaseImage func()

	stopping atomic.Bool
	done     atomic.Bool

	rw, ro []string          // its granted paths
	limits map[string]uint64 // its Limits property

	mu           sync.Mutex // the grants below, and stored
	stored       []string   // its descriptors' names in the fd store
	noNetwork    bool
	mcp          []string
	allow        []egress.Grant
	allowPrivate []egress.Grant
}

func (b *box) ended() bool { return b.done.Load() }

// running is the engine's sandbox once started, nil before and after.
func (b *box) running() *sandbox.Sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done.Load() {
		return nil
	}
	return b.sb
}

// record is b's state record.
func (b *box) record() Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := Record{ID: b.id, OwnerUID: b.owner, Profile: b.profile, Unit: b.unit, Argv: b.argv, MCP: b.mcp,
		Allow: grantStrings(b.allow), AllowPrivate: grantStrings(b.allowPrivate), Created: b.created, Supervisor: os.Getpid(),
		ReadWrite: b.rw, ReadOnly: b.ro, NoNetwork: b.noNetwork, Limits: b.limits}
	if b.sb != nil && len(b.stored) > 0 {
		st := b.sb.State()
		r.Handover = &st
	}
	return r
}

// handedOver reports whether b's descriptors are in the fd store.
func (b *box) handedOver() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.stored) > 0
}

func grantStrings(gs []egress.Grant) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.String())
	}
	return out
}

// propMap is the Sandbox properties' initial values.
func (b *box) propMap(eff profile.Request, limits map[string]uint64) prop.Map {
	c := func(v any) *prop.Prop { return &prop.Prop{Value: v, Emit: prop.EmitConst} }
	t := func(v any) *prop.Prop { return &prop.Prop{Value: v, Emit: prop.EmitTrue} }
	nz := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	return prop.Map{sodadapi.SandboxInterface: {
		"Id": c(b.id), "OwnerUID": c(b.owner), "Profile": c(b.profile), "Unit": c(b.unit),
		"CreatedTimestamp": c(uint64(b.created.UnixMicro())), "State": t("starting"),
		"MCP": t(nz(slices.Clone(b.mcp))), "Allow": t(grantStrings(b.allow)), "AllowPrivate": t(grantStrings(b.allowPrivate)),
		"ReadWritePaths": c(nz(eff.ReadWrite)), "ReadOnlyPaths": c(nz(eff.ReadOnly)), "NoNetwork": c(eff.NoNetwork),
		"Limits": c(limits), "Result": t(""), "ExitStatus": t(int32(-1)), "ExitedTimestamp": t(uint64(0)),
		"Keys": c(nz(b.keys.Describe())), "Image": c(b.image), "ModelTokens": {Value: b.modelTokens(), Emit: prop.EmitFalse},
	}}
}

// export puts b on the bus: its methods, its properties behind the access
// check, its introspection.
func (b *box) export(conn *dbus.Conn, m prop.Map) error {
	p, err := prop.Export(conn, b.path, m)
	if err != nil {
		return fmt.Errorf("export %s properties: %w", b.path, err)
	}
	b.props = p
	// Replaces prop's own Properties handler: Get and GetAll are
	// access-checked like GetSandbox.
	if err := conn.Export(gatedProps{b}, b.path, "org.freedesktop.DBus.Properties"); err != nil {
		return fmt.Errorf("export %s properties: %w", b.path, err)
	}
	if err := conn.Export(sandboxMethods{b}, b.path, sodadapi.SandboxInterface); err != nil {
		return fmt.Errorf("export %s: %w", b.path, err)
	}
	xml := node(sandboxXML, nil)
	return conn.Export(introspector(func() string { return xml }), b.path, "org.freedesktop.DBus.Introspectable")
}

func (b *box) unexport(conn *dbus.Conn) {
	for _, i := range []string{"org.freedesktop.DBus.Properties", sodadapi.SandboxInterface, "org.freedesktop.DBus.Introspectable"} {
		_ = conn.Export(nil, b.path, i)
	}
}

// visible is nil when c may see b: its owner, or anyone polkit grants
// manage-other without asking; NoSuchSandbox otherwise.
func (b *box) visible(ctx context.Context, c caller) error {
	if c.UID == b.owner || b.d.authz.allowed(ctx, c, sodadapi.ActionManageOther, b.details()) {
		return nil
	}
	return noSuchSandbox(b.id)
}

func noSuchSandbox(id string) error {
	return errorf(errNoSuchSandbox, "no sandbox %q", id)
}

func (b *box) details() map[string]string {
	return map[string]string{"sandbox": b.id, "profile": b.profile, "owner": fmt.Sprint(b.owner)}
}

// endImage ends the lease on the sandbox's image, once.
func (b *box) endImage() {
	if b.releaseImage != nil {
		b.releaseImage()
		b.releaseImage = nil
	}
}

// modelTokens is the ModelTokens property: the tokens spent through the
// sandbox's model gateway, by kind.
func (b *box) modelTokens() map[string]uint64 {
	u := b.keys.Usage()
	return map[string]uint64{"input": uint64(u.Input), "output": uint64(u.Output), "cache_read": uint64(u.CacheRead), "cache_write": uint64(u.CacheWrite)}
}

// refresh brings the properties that change without a signal up to date
// before they are read.
func (b *box) refresh() {
	if b.keys != nil {
		b.props.SetMust(sodadapi.SandboxInterface, "ModelTokens", b.modelTokens())
	}
}

// gatedProps is org.freedesktop.DBus.Properties of a sandbox.
type gatedProps struct{ b *box }

// Get implements org.freedesktop.DBus.Properties.Get.
func (g gatedProps) Get(sender dbus.Sender, iface, name string) (dbus.Variant, *dbus.Error) {
	c, ctx, cancel, err := g.b.d.begin(sender)
	if err != nil {
		return dbus.Variant{}, busError(err)
	}
	defer cancel()
	if err := g.b.visible(ctx, c); err != nil {
		return dbus.Variant{}, busError(err)
	}
	g.b.refresh()
	return g.b.props.Get(iface, name)
}

// GetAll implements org.freedesktop.DBus.Properties.GetAll.
func (g gatedProps) GetAll(sender dbus.Sender, iface string) (map[string]dbus.Variant, *dbus.Error) {
	c, ctx, cancel, err := g.b.d.begin(sender)
	if err != nil {
		return nil, busError(err)
	}
	defer cancel()
	if err := g.b.visible(ctx, c); err != nil {
		return nil, busError(err)
	}
	g.b.refresh()
	return g.b.props.GetAll(iface)
}

// Set implements org.freedesktop.DBus.Properties.Set: every property is
// read-only.
func (g gatedProps) Set(sender dbus.Sender, iface, name string, v dbus.Variant) *dbus.Error {
	return prop.ErrReadOnly
}

// sandboxMethods are the Sandbox interface's methods.
type sandboxMethods struct{ b *box }

// Kill sends a signal to the sandbox's command.
func (m sandboxMethods) Kill(sender dbus.Sender, sig int32, opts map[string]dbus.Variant) *dbus.Error {
	return busError(m.b.kill(sender, sig, opts))
}

// kill is Kill.
func (b *box) kill(sender dbus.Sender, sig int32, opts map[string]dbus.Variant) error {
	c, ctx, cancel, err := b.d.begin(sender)
	if err != nil {
		return err
	}
	defer cancel()
	o, err := decodeOptions(opts)
	if err != nil {
		return err
	}
	if err := b.d.authz.owned(ctx, c, b.owner, opKill, b.details(), o.Interactive); err != nil {
		return err
	}
	if sig < 1 || sig > 64 {
		return errorf(errInvalidArgs, "signal %d: want 1 to 64", sig)
	}
	sb := b.running()
	if sb == nil {
		return errorf(errNotRunning, "sandbox %s is not running", b.id)
	}
	b.d.journal.Info("sandbox kill", "sandbox", b.id, "owner_uid", b.owner, "caller_uid", c.UID, "signal", sig)
	if e := sb.Signal(syscall.Signal(sig)); e != nil {
		return fmt.Errorf("signal %d to %s: %w", sig, b.id, e)
	}
	return nil
}

// Grant adds a target to the live allow-list.
func (m sandboxMethods) Grant(sender dbus.Sender, target string, opts map[string]dbus.Variant) *dbus.Error {
	return busError(m.b.changeGrant(sender, target, opts, true))
}

// Revoke removes a target from the live allow-list.
func (m sandboxMethods) Revoke(sender dbus.Sender, target string, opts map[string]dbus.Variant) *dbus.Error {
	return busError(m.b.changeGrant(sender, target, opts, false))
}

// changeGrant is Grant (add) and Revoke.
func (b *box) changeGrant(sender dbus.Sender, target string, opts map[string]dbus.Variant, add bool) error {
	c, ctx, cancel, err := b.d.begin(sender)
	if err != nil {
		return err
	}
	defer cancel()
	o, err := decodeOptions(opts, "private")
	if err != nil {
		return err
	}
	if len(target) > maxString {
		return errorf(errInvalidTarget, "target: too long")
	}
	g, mcp, err := parseTarget(target, o.Private)
	if err != nil {
		return err
	}
	details := b.details()
	details["target"] = target
	method := "Revoke"
	if add {
		method = "Grant"
	}
	if !add {
		if err := b.d.authz.owned(ctx, c, b.owner, opRevoke, details, o.Interactive); err != nil {
			return err
		}
	} else {
		if c.UID != b.owner {
			if err := b.d.authz.check(ctx, c, sodadapi.ActionGrantOther, details, o.Interactive, nil); err != nil {
				return err
			}
		}
		action, excess := sodadapi.ActionGrant, ""
		if within, why := b.d.withinProfile(b.profile, g, mcp); !within {
			action, excess = sodadapi.ActionBeyondProfile, why
			details["excess"] = why
		}
		var refused error
		if action == sodadapi.ActionBeyondProfile {
			refused = errorf(errExceedsProfile, "%s; polkit refused %s", excess, sodadapi.ActionBeyondProfile)
		}
		if err := b.d.authz.check(ctx, c, action, details, o.Interactive, refused); err != nil {
			return err
		}
	}
	if mcp != "" {
		return errorf(errNotSupported, "%s %s: MCP servers are granted when the sandbox is created (spec MCP); the engine cannot relay a new port into a running sandbox", method, target)
	}
	sb := b.running()
	if sb == nil {
		return errorf(errNotRunning, "sandbox %s is not running", b.id)
	}
	b.mu.Lock()
	noNet := b.noNetwork
	b.mu.Unlock()
	if noNet {
		return errorf(errInvalidTarget, "%s %s: sandbox %s has no network", method, target, b.id)
	}
	b.mu.Lock()
	if !add {
		// A revoke names the target: whether it was granted with
		// private does not matter.
		for _, h := range append(slices.Clone(b.allow), b.allowPrivate...) {
			if h.Host == g.Host && h.Port == g.Port {
				g = h
			}
		}
	}
	held := slices.Contains(b.allow, g) || slices.Contains(b.allowPrivate, g)
	b.mu.Unlock()
	if held == add {
		// Granting what is granted, revoking what is not: nothing changes
		// (the engine would call it an error).
		return nil
	}
	by := fmt.Sprintf("uid %d", c.UID)
	var e error
	if add {
		e = sb.SetEgress(ctx, by, []egress.Grant{g}, nil)
	} else {
		e = sb.SetEgress(ctx, by, nil, []egress.Grant{g})
	}
	if e != nil {
		return fmt.Errorf("%s %s: %w", method, target, e)
	}
	b.mu.Lock()
	list := &b.allow
	if g.Private {
		list = &b.allowPrivate
	}
	*list = slices.DeleteFunc(*list, func(x egress.Grant) bool { return x == g })
	if add {
		*list = append(*list, g)
	}
	name, vals := "Allow", grantStrings(*list)
	if g.Private {
		name = "AllowPrivate"
	}
	b.mu.Unlock()
	b.props.SetMust(sodadapi.SandboxInterface, name, vals)
	if err := b.d.store.Write(b.record()); err != nil {
		b.d.log.Error("state record", "err", err)
	}
	b.d.journal.Info("sandbox "+map[bool]string{true: "grant", false: "revoke"}[add], "sandbox", b.id, "owner_uid", b.owner, "caller_uid", c.UID, "target", g.String())
	return nil
}

// ReadAudit returns kept audit records from cursor on.
func (m sandboxMethods) ReadAudit(sender dbus.Sender, cursor uint64, max uint32, opts map[string]dbus.Variant) ([]string, uint64, *dbus.Error) {
	recs, next, err := m.b.readAudit(sender, cursor, max, opts)
	return recs, next, busError(err)
}

// readAudit is ReadAudit.
func (b *box) readAudit(sender dbus.Sender, cursor uint64, max uint32, opts map[string]dbus.Variant) ([]string, uint64, error) {
	c, ctx, cancel, err := b.d.begin(sender)
	if err != nil {
		return nil, 0, err
	}
	defer cancel()
	o, err := decodeOptions(opts)
	if err != nil {
		return nil, 0, err
	}
	if err := b.d.authz.owned(ctx, c, b.owner, opReadAudit, b.details(), o.Interactive); err != nil {
		return nil, 0, err
	}
	if max == 0 || max > maxReadAudit {
		max = maxReadAudit
	}
	recs, next := b.audit.read(cursor, int(max))
	return recs, next, nil
}

// wait follows the sandbox to its end: exit status, signal, record and
// home removed, the object kept for Linger.
func (b *box) wait() {
	d := b.d
	defer d.live.Done()
	pt := newPhases()
	if !b.handedOver() {
		// A new sandbox (an adopted one is in the store already), off
		// the caller's path. Init copied the home into the sandbox: the
		// host's copy goes (nothing of it is left for a successor).
		if b.home != nil {
			if err := b.home.Remove(); err != nil {
				d.log.Warn("remove sandbox home", "sandbox", b.id, "err", err)
			}
			b.home = nil
		}
		// Its descriptors go to the fd store, and its record gets what
		// a successor needs.
		d.storeHandover(b)
		if err := d.store.Write(b.record()); err != nil {
			d.log.Error("state record", "sandbox", b.id, "err", err)
		}
	}
	pt.mark("handover")
	st, err := b.sb.Wait(d.run) // b.sb is set before wait starts
	pt.mark("wait")
	if sandboxDetached(err) {
		// Handed over: its record and descriptors are the successor's.
		for _, f := range b.files {
			f.Close()
		}
		b.alog.Close()
		return
	}
	d.unstore(b)
	result, code := "success", int32(st.Code)
	switch {
	case err != nil:
		result, code = "exit-code", 125
		d.log.Error("sandbox wait", "sandbox", b.id, "err", err)
	case b.stopping.Load():
		result = "supervisor-lost"
	case st.TimedOut:
		result = "timeout"
	case st.Signal != "":
		result = "signal"
	case st.Code != 0:
		result = "exit-code"
	}
	state := "exited"
	if err != nil {
		state = "failed"
	}
	b.done.Store(true)
	for _, f := range b.files {
		f.Close()
	}
	if b.home != nil {
		if err := b.home.Remove(); err != nil {
			d.log.Warn("remove sandbox home", "sandbox", b.id, "err", err)
		}
	}
	b.endImage()
	if b.keys != nil {
		u := b.keys.Usage()
		b.keys.Close()
		if u.Total() > 0 {
			d.journal.Info("sandbox model usage", "sandbox", b.id, "owner_uid", b.owner, "input_tokens", u.Input, "output_tokens", u.Output,
				"cache_read_tokens", u.CacheRead, "cache_write_tokens", u.CacheWrite)
		}
	}
	b.alog.Close()
	b.props.SetMust(sodadapi.SandboxInterface, "Result", result)
	b.props.SetMust(sodadapi.SandboxInterface, "ExitStatus", code)
	b.props.SetMust(sodadapi.SandboxInterface, "ExitedTimestamp", uint64(time.Now().UnixMicro()))
	b.props.SetMust(sodadapi.SandboxInterface, "State", state)
	if err := d.store.Remove(b.id); err != nil {
		d.log.Error("state record", "err", err)
	}
	d.journal.Info("sandbox exited", "sandbox", b.id, "owner_uid", b.owner, "result", result, "status", code)
	_ = d.conn.Emit(sodadapi.ManagerPath, sodadapi.ManagerInterface+".SandboxExited", b.id, b.path, result, code)
	pt.mark("exited")
	d.log.Debug("sandbox exit reported", append([]any{"sandbox", b.id}, pt.attrs()...)...)
	d.touch()
	go func() {
		t := time.NewTimer(d.cfg.Linger)
		defer t.Stop()
		select {
		case <-t.C:
		case <-d.run.Done():
		}
		d.remove(b)
	}()
}
