package sodad

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/agentrun"
	"github.com/soda-project/soda/internal/auditsink"
	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/version"
)

// callTimeout bounds one method call (an interactive polkit dialog
// included).
const callTimeout = 2 * time.Minute

// begin starts a method call: who the caller is, from the bus.
func (d *Daemon) begin(sender dbus.Sender) (caller, context.Context, context.CancelFunc, error) {
	d.touch()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	uid, gids, err := d.peers.Credentials(ctx, string(sender))
	if err != nil {
		cancel()
		return caller{}, nil, nil, fmt.Errorf("who is calling: %w", err)
	}
	return caller{Sender: string(sender), UID: uid, GIDs: gids}, ctx, cancel, nil
}

// exportManager exports the Manager object and the sandboxes' parent.
func (d *Daemon) exportManager() error {
	p, err := prop.Export(d.conn, sodadapi.ManagerPath, prop.Map{sodadapi.ManagerInterface: {
		"Version":  {Value: version.Version, Emit: prop.EmitConst},
		"Draining": {Value: false, Emit: prop.EmitTrue},
	}})
	if err != nil {
		return fmt.Errorf("export the Manager's properties: %w", err)
	}
	d.mgr = p
	if err := d.conn.Export(manager{d}, sodadapi.ManagerPath, sodadapi.ManagerInterface); err != nil {
		return fmt.Errorf("export the Manager: %w", err)
	}
	mxml := node(managerXML, []string{"sandbox"})
	if err := d.conn.Export(introspector(func() string { return mxml }), sodadapi.ManagerPath, "org.freedesktop.DBus.Introspectable"); err != nil {
		return fmt.Errorf("export the Manager's introspection: %w", err)
	}
	return d.conn.Export(introspector(func() string {
		d.mu.Lock()
		defer d.mu.Unlock()
		var kids []string
		for _, b := range d.boxes {
			kids = append(kids, sodadapi.PathLabel(b.id))
		}
		return node("", kids)
	}), dbus.ObjectPath(sodadapi.SandboxPathPrefix), "org.freedesktop.DBus.Introspectable")
}

// remove takes an ended sandbox off the bus.
func (d *Daemon) remove(b *box) {
	d.mu.Lock()
	delete(d.boxes, b.id)
	d.mu.Unlock()
	b.unexport(d.conn)
	_ = d.conn.Emit(sodadapi.ManagerPath, sodadapi.ManagerInterface+".SandboxRemoved", b.id, b.path)
}

// manager is the Manager interface's methods.
type manager struct{ d *Daemon }

// ListProfiles lists the profiles whose Users=/Groups= include the caller.
func (m manager) ListProfiles(sender dbus.Sender) ([]sodadapi.ProfileEntry, *dbus.Error) {
	c, _, cancel, err := m.d.begin(sender)
	if err != nil {
		return nil, busError(err)
	}
	defer cancel()
	ps, perr := profile.LoadAll(m.d.cfg.ProfileDir)
	if perr != nil {
		m.d.log.Warn("profiles that do not parse", "err", perr)
	}
	out := []sodadapi.ProfileEntry{}
	for _, p := range ps {
		if p.Allows(c.UID, c.GIDs) {
			out = append(out, sodadapi.ProfileEntry{Name: p.Name, Description: p.Description})
		}
	}
	return out, nil
}

// ListSandboxes lists the caller's sandboxes, and everyone's with
// manage-other (asked without interaction).
func (m manager) ListSandboxes(sender dbus.Sender) ([]sodadapi.SandboxEntry, *dbus.Error) {
	c, ctx, cancel, err := m.d.begin(sender)
	if err != nil {
		return nil, busError(err)
	}
	defer cancel()
	m.d.mu.Lock()
	boxes := make([]*box, 0, len(m.d.boxes))
	for _, b := range m.d.boxes {
		boxes = append(boxes, b)
	}
	m.d.mu.Unlock()
	slices.SortFunc(boxes, func(a, b *box) int { return a.created.Compare(b.created) })
	others := -1 // unknown until asked
	out := []sodadapi.SandboxEntry{}
	for _, b := range boxes {
		if b.owner != c.UID {
			if others < 0 {
				others = 0
				if m.d.authz.allowed(ctx, c, sodadapi.ActionManageOther, nil) {
					others = 1
				}
			}
			if others == 0 {
				continue
			}
		}
		state, _ := b.props.GetMust(sodadapi.SandboxInterface, "State").(string)
		out = append(out, sodadapi.SandboxEntry{ID: b.id, Owner: b.owner, Profile: b.profile, State: state, Path: b.path})
	}
	return out, nil
}

// GetSandbox returns the object of a sandbox the caller may see.
func (m manager) GetSandbox(sender dbus.Sender, id string) (dbus.ObjectPath, *dbus.Error) {
	c, ctx, cancel, err := m.d.begin(sender)
	if err != nil {
		return "", busError(err)
	}
	defer cancel()
	m.d.mu.Lock()
	b := m.d.boxes[id]
	m.d.mu.Unlock()
	if b == nil {
		return "", busError(noSuchSandbox(id))
	}
	if err := b.visible(ctx, c); err != nil {
		return "", busError(err)
	}
	return b.path, nil
}

// CreateSandbox creates a sandbox from a profile and starts argv in it.
func (m manager) CreateSandbox(sender dbus.Sender, profileName string, argv []string, spec map[string]dbus.Variant,
	fds map[string]dbus.Variant, opts map[string]dbus.Variant) (string, dbus.ObjectPath, *dbus.Error) {
	id, path, err := m.d.createSandbox(sender, profileName, argv, spec, fds, opts)
	return id, path, busError(err)
}

// createSandbox is CreateSandbox, in four phases: the request is read,
// admitted (profile, polkit, the caller's access to its paths), given a
// box within the daemon's limits, and started.
func (d *Daemon) createSandbox(sender dbus.Sender, profileName string, argv []string, spec map[string]dbus.Variant,
	fds map[string]dbus.Variant, opts map[string]dbus.Variant) (string, dbus.ObjectPath, error) {
	// The fds are sodad's from here: closed on every path but the one
	// that hands them to the sandbox. (fds is a{sv}, each value an h:
	// godbus 5.1 and 5.2 cannot decode an a{sh} holding fds.)
	files, owned, badFd := receiveFds(fds)
	handed := false
	defer func() {
		if !handed {
			for _, f := range owned {
				f.Close()
			}
		}
	}()

	pt := newPhases()
	c, ctx, cancel, err := d.begin(sender)
	if err != nil {
		return "", "", err
	}
	defer cancel()
	pt.mark("caller")
	if badFd != "" {
		return "", "", errorf(errInvalidFd, "%s", badFd)
	}
	cr, err := d.readCreate(argv, spec, files, opts)
	if err != nil {
		return "", "", err
	}
	if err := d.admit(ctx, c, profileName, &cr); err != nil {
		return "", "", err
	}
	pt.mark("admit")
	b, err := d.register(c, cr)
	if err != nil {
		return "", "", err
	}
	if err := d.launch(b, cr, owned, pt); err != nil {
		d.discard(b)
		return "", "", err
	}
	handed = true
	d.log.Debug("sandbox created", append([]any{"sandbox", b.id}, pt.attrs()...)...)
	return b.id, b.path, nil
}

// createRequest is a CreateSandbox call as it is read and admitted.
type createRequest struct {
	argv   []string
	req    request
	opts   options
	st     streams
	p      *profile.Profile // the profile, once admitted
	eff    profile.Request  // the request narrowed to the profile
	action string           // the polkit action that allowed it
}

// readCreate decodes and checks a CreateSandbox call's arguments, before
// anything is looked up: its options, spec, argv and fds.
func (d *Daemon) readCreate(argv []string, spec map[string]dbus.Variant, files map[string]*os.File, opts map[string]dbus.Variant) (createRequest, error) {
	cr := createRequest{argv: argv}
	var err error
	if cr.opts, err = decodeOptions(opts); err != nil {
		return cr, err
	}
	if cr.req, err = decodeSpec(spec); err != nil {
		return cr, err
	}
	switch {
	case cr.req.Persistent && len(argv) > 0:
		return cr, errorf(errInvalidArgs, "argv: a persistent sandbox runs what Exec asks: pass an empty argv")
	case cr.req.Persistent && cr.req.TTY:
		return cr, errorf(errInvalidSpec, "TTY: a persistent sandbox has no terminal of its own")
	case !cr.req.Persistent:
		if err := decodeArgv(argv); err != nil {
			return cr, err
		}
	}
	if cr.st, err = checkFds(files, cr.req.TTY); err != nil {
		return cr, err
	}
	d.mu.Lock()
	draining := d.draining
	d.mu.Unlock()
	if draining {
		return cr, errorf(errDraining, "sodad is stopping: no new sandboxes")
	}
	return cr, nil
}

// admit decides whether caller c may have cr: its profile, polkit's
// answer for the action that the request needs, the caller's own access
// to the paths it asks for, per-run servers, and masks inside the grants.
func (d *Daemon) admit(ctx context.Context, c caller, profileName string, cr *createRequest) error {
	p, perr := profile.Load(d.cfg.ProfileDir, profileName)
	if perr != nil {
		d.log.Warn("CreateSandbox: profile", "profile", profileName, "caller_uid", c.UID, "err", perr)
		msg := fmt.Sprintf("no profile %q", profileName)
		if c.UID == 0 {
			msg += ": " + perr.Error()
		}
		return errorf(errNoSuchProfile, "%s", msg)
	}
	eff, action, details, err := decideCreate(p, c, cr.req.Request)
	if err != nil {
		return err
	}
	var refused error
	if action == sodadapi.ActionBeyondProfile && details["excess"] != "" {
		refused = errorf(errExceedsProfile, "%s; polkit refused %s", details["excess"], sodadapi.ActionBeyondProfile)
	}
	if err := d.authz.check(ctx, c, action, details, cr.opts.Interactive, refused); err != nil {
		return err
	}
	if err := callerMayAccess(c, eff.ReadWrite, true); err != nil {
		return err
	}
	if err := callerMayAccess(c, eff.ReadOnly, false); err != nil {
		return err
	}
	if len(cr.req.RunMCP) > 0 {
		if !p.PerRunMCP {
			return errorf(errAccessDenied, "profile %s does not allow per-run MCP servers (RunMCP): an administrator allows them with PerRunMCP=yes in its [Grants] section", p.Name)
		}
		if cr.st.Life == nil {
			return errorf(errInvalidFd, "fd life: RunMCP needs the read end of a pipe that the caller holds open while it runs its servers")
		}
	}
	if err := masksInside(cr.req.Masks, slices.Concat(eff.ReadWrite, eff.ReadOnly)); err != nil {
		return err
	}
	cr.p, cr.eff, cr.action = p, eff, action
	return nil
}

// register makes the box of an admitted request and counts it among the
// daemon's sandboxes, unless that would pass the daemon's limits (in all,
// and per user).
func (d *Daemon) register(c caller, cr createRequest) (*box, error) {
	id := newID(cr.p.Name)
	b := &box{d: d, id: id, path: sodadapi.SandboxPath(id), owner: c.UID, profile: cr.p.Name, unit: "soda-sandbox-" + id + ".scope",
		created: time.Now(), argv: slices.Clone(cr.argv), audit: newAuditRing(auditKeep),
		alog: auditsink.NewLog(d.journal.With("owner_uid", c.UID)), noNetwork: cr.eff.NoNetwork,
		mcp: slices.Clone(cr.eff.MCP), perRun: len(cr.req.RunMCP) > 0}
	for _, g := range cr.eff.Allow {
		if g.Private {
			b.allowPrivate = append(b.allowPrivate, g)
		} else {
			b.allow = append(b.allow, g)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	total, mine := 0, 0
	for _, x := range d.boxes {
		if !x.ended() {
			total++
			if x.owner == c.UID {
				mine++
			}
		}
	}
	if total >= d.cfg.MaxSandboxes || mine >= d.cfg.MaxPerUser {
		return nil, errorf(errTooManySandboxes, "%d sandboxes run (%d of uid %d); at most %d, %d per user", total, mine, c.UID, d.cfg.MaxSandboxes, d.cfg.MaxPerUser)
	}
	d.boxes[id] = b
	return b, nil
}

// discard undoes what register and a failed launch made of b: its place
// among the daemon's boxes, its bus object, its home and its record.
func (d *Daemon) discard(b *box) {
	d.mu.Lock()
	delete(d.boxes, b.id)
	d.mu.Unlock()
	if b.props != nil {
		b.unexport(d.conn)
	}
	if b.home != nil {
		_ = b.home.Remove()
	}
	b.keys.Close()
	b.endImage()
	_ = d.store.Remove(b.id)
}

// launch builds b's sandbox (agentrun), exports its object, records it
// and starts it; from then on the sandbox owns the fds (owned).
func (d *Daemon) launch(b *box, cr createRequest, owned []*os.File, pt *phases) error {
	eff := cr.eff
	sspec, err := d.buildSpec(b, eff, cr.req, cr.st)
	if err != nil {
		return err
	}
	if err := d.startKeys(b, cr.p, &sspec); err != nil {
		return err
	}
	if err := d.startImage(d.run, b, cr.p, &sspec); err != nil {
		return err
	}
	pt.mark("spec")
	limits := map[string]uint64{"MemoryMax": uint64(eff.Limits.MemoryMax), "TasksMax": uint64(eff.Limits.TasksMax),
		"CPUQuotaPercent": eff.Limits.CPUPercent, "CPUWeight": eff.Limits.CPUWeight, "TimeoutUSec": uint64(eff.Limits.Timeout / time.Microsecond),
		"TmpSize": uint64(eff.Limits.TmpSize), "HomeSize": uint64(eff.Limits.HomeSize)}
	if cr.req.Persistent {
		limits["WorkspaceSize"] = uint64(eff.Limits.WorkspaceSize)
	}
	b.rw, b.ro, b.limits = eff.ReadWrite, eff.ReadOnly, limits
	if err := b.export(d.conn, b.propMap(eff, limits)); err != nil {
		return err
	}
	if err := d.store.Write(b.record()); err != nil {
		return err
	}
	pt.mark("record")
	d.journal.Info("sandbox create", "sandbox", b.id, "owner_uid", b.owner, "profile", b.profile, "unit", b.unit, "action", cr.action, "argv", strings.Join(cr.argv, " "))
	sb, err := d.engine.Start(d.run, sspec)
	if err != nil {
		d.journal.Warn("sandbox did not start", "sandbox", b.id, "owner_uid", b.owner, "err", err)
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return fmt.Errorf("start %s (exit status %d): %w", cr.argv[0], ce.Code, err)
		}
		return fmt.Errorf("start the sandbox: %w", err)
	}
	pt.mark("start")
	b.mu.Lock()
	b.files = owned
	b.sb = sb
	b.mu.Unlock()
	b.keys.Attach(sb)
	if cr.st.Life != nil {
		go b.watchLife(cr.st.Life)
	}
	d.live.Add(1)
	b.props.SetMust(sodadapi.SandboxInterface, "State", "running")
	_ = d.conn.Emit(sodadapi.ManagerPath, sodadapi.ManagerInterface+".SandboxNew", b.id, b.path)
	go b.wait()
	return nil
}

// decideCreate narrows the request to the profile and says which polkit
// action creating it needs, with the details for polkit's rules: create
// within a profile that lists the caller, beyond-profile for more than it
// allows or a profile that does not list the caller.
func decideCreate(p *profile.Profile, c caller, req profile.Request) (profile.Request, string, map[string]string, error) {
	details := map[string]string{"profile": p.Name}
	eff, err := p.Narrow(req)
	action := sodadapi.ActionCreate
	var ee *profile.ExceedsError
	switch {
	case errors.As(err, &ee):
		action = sodadapi.ActionBeyondProfile
		var ex []string
		for _, x := range ee.Excesses {
			ex = append(ex, x.Message)
		}
		details["excess"] = strings.Join(ex, "; ")
	case err != nil:
		return profile.Request{}, "", nil, errorf(errInvalidSpec, "%w", err)
	}
	if !p.Allows(c.UID, c.GIDs) {
		action = sodadapi.ActionBeyondProfile
		if details["excess"] == "" {
			details["excess"] = fmt.Sprintf("profile %s does not list uid %d", p.Name, c.UID)
		}
	}
	return eff, action, details, nil
}

// withinProfile says whether granting g (or MCP server mcp) stays within
// the profile, and if not, why.
func (d *Daemon) withinProfile(name string, g egress.Grant, mcp string) (bool, string) {
	p, err := profile.Load(d.cfg.ProfileDir, name)
	if err != nil {
		return false, fmt.Sprintf("profile %s: %v", name, err)
	}
	req := profile.Request{MCP: []string{}, Allow: []egress.Grant{}}
	if mcp != "" {
		req.MCP = []string{mcp}
	} else {
		req.Allow = []egress.Grant{g}
	}
	_, err = p.Narrow(req)
	if err == nil {
		return true, ""
	}
	return false, err.Error()
}

// buildSpec is the engine's spec from the recipe (agentrun): the
// effective request with its streams, the granted soda-mcp@ servers and
// the caller's own (RunMCP), and a home with the agents' files in it.
func (d *Daemon) buildSpec(b *box, eff profile.Request, req request, st streams) (sandbox.Spec, error) {
	spec := sandbox.Spec{ID: b.id, Argv: b.argv, Env: req.Env, Dir: req.Dir, ReadOnly: eff.ReadOnly, ReadWrite: eff.ReadWrite,
		NoNetwork: eff.NoNetwork, Timeout: eff.Limits.Timeout, Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, TTY: st.TTY,
		Limits: sandbox.Limits{MemoryMax: eff.Limits.MemoryMax, TasksMax: eff.Limits.TasksMax, CPUPercent: eff.Limits.CPUPercent,
			CPUWeight: eff.Limits.CPUWeight, TmpSize: eff.Limits.TmpSize, HomeSize: eff.Limits.HomeSize}}
	if req.Persistent {
		spec.Persistent, spec.WorkspaceSize, spec.Argv = true, eff.Limits.WorkspaceSize, nil
	}
	spec.Egress.Allow = eff.Allow
	spec.Masks = req.Masks
	servers, err := d.servers(b.owner, eff.MCP, req.RunMCP)
	if err != nil {
		return spec, err
	}
	spec, b.home, err = agentrun.Build(d.homes, agentrun.Recipe{Sandbox: spec, Servers: servers})
	return spec, err
}

// servers are a sandbox's MCP servers: the granted soda-mcp@ servers,
// then the caller's own (RunMCP); a port of the caller's must be one that
// a socket of owner listens on, and none may clash with another or with
// the sandbox's proxy.
func (d *Daemon) servers(owner uint32, mcp []string, run []sodadapi.RunServer) ([]mcpgrant.Grant, error) {
	r := mcpgrant.Resolver{ConfigDir: d.cfg.MCPConfigDir, RuntimeDirs: runstate.SearchDirs()}
	var servers []mcpgrant.Grant
	for _, name := range mcp {
		g, err := r.Grant(name, sandbox.DefaultProxyPort, "")
		if err != nil {
			return nil, errorf(errInvalidSpec, "MCP %s: %w", name, err)
		}
		servers = append(servers, g)
	}
	for _, rs := range run {
		g := mcpgrant.Grant{Entry: clientconfig.Server{Name: rs.Name, URL: rs.URL, Headers: rs.Headers, Command: rs.Command, Args: rs.Args, Env: rs.Env}}
		if rs.Port != 0 {
			g.Port = rs.Port
			g.Entry.URL, g.Entry.Token = fmt.Sprintf("http://127.0.0.1:%d/mcp", rs.Port), rs.Token
		}
		servers = append(servers, g)
	}
	// A clash is the request's fault, whether or not the caller owns
	// the port: it is said first.
	if err := agentrun.Check(servers); err != nil {
		return nil, errorf(errInvalidSpec, "RunMCP: %w", err)
	}
	for _, rs := range run {
		if rs.Port == 0 {
			continue
		}
		if err := ownsLoopbackListener(owner, rs.Port); err != nil {
			return nil, errorf(errAccessDenied, "RunMCP %s: %w", rs.Name, err)
		}
	}
	return servers, nil
}

// masksInside checks that every mask is of a file inside one of the
// granted directories, its symbolic links resolved (as the engine will):
// a request may only change what the sandbox sees of its own grants.
func masksInside(masks []sandbox.Mask, grants []string) error {
	below := func(p string) bool {
		for _, g := range grants {
			if strings.HasPrefix(p, filepath.Clean(g)+"/") {
				return true
			}
		}
		return false
	}
	for _, m := range masks {
		// Named below a grant before anything is looked up as root: the
		// answer must not tell whether a path elsewhere exists.
		if !below(filepath.Clean(m.Path)) {
			return errorf(errInvalidSpec, "Masks %s: not inside a granted directory (ReadWritePaths, ReadOnlyPaths)", m.Path)
		}
		p, err := filepath.EvalSymlinks(m.Path)
		if err != nil {
			return errorf(errInvalidSpec, "Masks %s: %w", m.Path, err)
		}
		inside := false
		for _, g := range grants {
			if r, err := filepath.EvalSymlinks(g); err == nil && strings.HasPrefix(p, r+"/") {
				inside = true
			}
		}
		if !inside {
			return errorf(errInvalidSpec, "Masks %s: not inside a granted directory (ReadWritePaths, ReadOnlyPaths)", m.Path)
		}
	}
	return nil
}

// watchLife ends the sandbox when the caller that runs its per-run MCP
// servers is gone: its life pipe hangs up (or says anything at all), since
// their ports are free then, for anyone to take. It polls, so that it
// holds no thread in a read and returns once the sandbox has ended.
func (b *box) watchLife(f *os.File) {
	fd := int(f.Fd())
	for !b.ended() {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 1000)
		if errors.Is(err, unix.EINTR) || err == nil && n == 0 {
			continue
		}
		if err != nil || pfd[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			break
		}
	}
	if sb := b.running(); sb != nil && !b.ended() {
		b.d.journal.Info("sandbox stop: the caller running its per-run MCP servers is gone", "sandbox", b.id, "owner_uid", b.owner)
		sb.Stop()
	}
}

// callerMayAccess checks that the caller may itself use each directory
// (sodad runs as root, the sandbox gets its owner's access through an
// idmapped mount): search on every component, and read (and write for
// read-write grants) on the directory, by its mode bits.
func callerMayAccess(c caller, dirs []string, write bool) error {
	if c.UID == 0 {
		return nil
	}
	key := "ReadOnlyPaths"
	if write {
		key = "ReadWritePaths"
	}
	for _, dir := range dirs {
		p := "/"
		comps := strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/")
		for i, comp := range comps {
			if comp != "" {
				p = filepath.Join(p, comp)
			}
			var need uint32 = 1 // search
			if i == len(comps)-1 {
				need |= 4
				if write {
					need |= 2
				}
			}
			var s unix.Stat_t
			if err := unix.Stat(p, &s); err != nil {
				return errorf(errInvalidSpec, "%s %s: %w", key, dir, err)
			}
			if !modeAllows(s, c, need) {
				return errorf(errInvalidSpec, "%s %s: uid %d may not access %s", key, dir, c.UID, p)
			}
		}
	}
	return nil
}

// modeAllows is the permission check of the mode bits (no ACLs).
func modeAllows(s unix.Stat_t, c caller, need uint32) bool {
	mode := uint32(s.Mode) & 0o777 // uint16 on macOS
	switch {
	case s.Uid == c.UID:
		return (mode>>6)&need == need
	case slices.Contains(c.GIDs, s.Gid):
		return (mode>>3)&need == need
	}
	return mode&need == need
}

// stopUnit stops a unit through systemd and waits for the job.
func stopUnit(ctx context.Context, unit string) error {
	conn, err := sdbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("connect to systemd: %w", err)
	}
	defer conn.Close()
	ch := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("stop %s: %w", unit, err)
	}
	select {
	case r := <-ch:
		if r != "done" {
			return fmt.Errorf("stop %s: job %s", unit, r)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// receiveFds takes the Unix fds of a method's fds argument (a{sv}, each
// value an h): the files by key, all of them for the caller to close,
// and, for a value that is not an fd, what to say about it.
func receiveFds(fds map[string]dbus.Variant) (map[string]*os.File, []*os.File, string) {
	files := map[string]*os.File{}
	var owned []*os.File
	var badFd string
	for _, k := range sortedKeys(fds) {
		fd, ok := fds[k].Value().(dbus.UnixFD)
		if !ok {
			if badFd == "" {
				badFd = fmt.Sprintf("fd %s: want a variant of type h (a Unix fd), got %s", k, fds[k].Signature())
			}
			continue
		}
		f := os.NewFile(uintptr(fd), "fd "+k)
		if f == nil {
			continue
		}
		unix.CloseOnExec(int(fd))
		files[k] = f
		owned = append(owned, f)
	}
	return files, owned, badFd
}
