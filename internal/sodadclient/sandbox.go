package sodadclient

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/sodadapi"
)

// Spec is the request of CreateSandbox (docs/dbus-api.md, its spec
// table); it can only narrow the profile. A nil list is left out, so the
// profile's value applies; a non-nil empty one is sent (MCP: none). Zero
// numbers and empty strings are left out.
type Spec struct {
	MCP              []string
	Allow            []string // HOST:PORT
	AllowPrivate     []string
	NoNetwork        bool
	ReadWritePaths   []string
	ReadOnlyPaths    []string
	WorkingDirectory string
	Environment      []string // NAME=VALUE
	MemoryMax        uint64   // bytes
	TmpSize          uint64
	HomeSize         uint64
	TasksMax         uint64
	CPUQuotaPercent  uint64
	CPUWeight        uint64 // 1..10000
	Timeout          time.Duration
	// Persistent makes a live sandbox that runs what Exec asks (Argv
	// empty), with a private workspace of WorkspaceSize bytes at
	// /workspace (0: the profile's ceiling).
	Persistent    bool
	WorkspaceSize uint64
	// RunMCP are the caller's own MCP servers for this sandbox (sodactl
	// run --mcp-config), which the profile must allow (PerRunMCP=yes);
	// with any, Stdio.Life must be set.
	RunMCP []RunServer
	// Masks are files inside the granted directories that the sandbox
	// sees with other contents.
	Masks []Mask
}

// RunServer is one entry of Spec.RunMCP: exactly one of Port (a server
// the caller runs on 127.0.0.1, with its Token), URL (a remote one, with
// its Headers) or Command (a stdio server the agent starts inside).
type RunServer = sodadapi.RunServer

// Mask is a file the sandbox sees with Data as its contents.
type Mask = sodadapi.Mask

// runMCPArg is RunMCP as a(sa{sv}).
func runMCPArg(rs []RunServer) []sodadapi.RunServerEntry {
	out := make([]sodadapi.RunServerEntry, len(rs))
	for i, r := range rs {
		out[i] = r.Entry()
	}
	return out
}

// dict is the spec as the a{sv} sodad reads.
func (s Spec) dict(tty bool) map[string]dbus.Variant {
	d := map[string]dbus.Variant{}
	lists := []struct {
		key string
		v   []string
	}{{"MCP", s.MCP}, {"Allow", s.Allow}, {"AllowPrivate", s.AllowPrivate}, {"ReadWritePaths", s.ReadWritePaths}, {"ReadOnlyPaths", s.ReadOnlyPaths}, {"Environment", s.Environment}}
	for _, l := range lists {
		if l.v != nil {
			d[l.key] = dbus.MakeVariant(l.v)
		}
	}
	nums := []struct {
		key string
		v   uint64
	}{{"MemoryMax", s.MemoryMax}, {"TmpSize", s.TmpSize}, {"HomeSize", s.HomeSize}, {"TasksMax", s.TasksMax}, {"CPUQuotaPercent", s.CPUQuotaPercent}, {"CPUWeight", s.CPUWeight}, {"TimeoutUSec", uint64(s.Timeout / time.Microsecond)}, {"WorkspaceSize", s.WorkspaceSize}}
	for _, n := range nums {
		if n.v != 0 {
			d[n.key] = dbus.MakeVariant(n.v)
		}
	}
	if s.NoNetwork {
		d["NoNetwork"] = dbus.MakeVariant(true)
	}
	if s.Persistent {
		d["Persistent"] = dbus.MakeVariant(true)
	}
	if s.WorkingDirectory != "" {
		d["WorkingDirectory"] = dbus.MakeVariant(s.WorkingDirectory)
	}
	if tty {
		d["TTY"] = dbus.MakeVariant(true)
	}
	if len(s.RunMCP) > 0 {
		d["RunMCP"] = dbus.MakeVariant(runMCPArg(s.RunMCP))
	}
	if len(s.Masks) > 0 {
		d["Masks"] = dbus.MakeVariant(s.Masks)
	}
	return d
}

// Stdio are the streams passed to the command as Unix fds: Stdin, Stdout
// and Stderr, or TTY alone (the slave side of a pty the caller holds the
// master of; see OpenPTY). A nil stream is /dev/null in the sandbox.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
	TTY                   *os.File
	// Life is the read end of a pipe whose write end the caller keeps
	// open while it runs the sandbox's per-run MCP servers (Spec.RunMCP):
	// sodad ends the sandbox when it reads EOF.
	Life *os.File
}

// fds are the streams of CreateSandbox, by name; the files stay open until the call
// returns (sodad holds its own copies by then).
func (s Stdio) fds() (map[string]dbus.UnixFD, error) {
	m := map[string]dbus.UnixFD{}
	if s.Life != nil {
		m["life"] = dbus.UnixFD(s.Life.Fd())
	}
	if s.TTY != nil {
		if s.Stdin != nil || s.Stdout != nil || s.Stderr != nil {
			return nil, fmt.Errorf("a tty is passed alone, without stdin, stdout or stderr")
		}
		m["tty"] = dbus.UnixFD(s.TTY.Fd())
		return m, nil
	}
	for _, f := range []struct {
		key string
		f   *os.File
	}{{"stdin", s.Stdin}, {"stdout", s.Stdout}, {"stderr", s.Stderr}} {
		if f.f != nil {
			m[f.key] = dbus.UnixFD(f.f.Fd())
		}
	}
	return m, nil
}

// Request is one CreateSandbox call.
type Request struct {
	Profile     string
	Argv        []string
	Spec        Spec
	Stdio       Stdio
	Interactive bool // let polkit ask for a password (set on a terminal)
}

// Sandbox is one of sodad's sandboxes.
type Sandbox struct {
	c    *Client
	ID   string
	Path dbus.ObjectPath

	exited chan *dbus.Signal // set by Create: subscribed before the sandbox existed
	cancel func()
}

// Create creates a sandbox and starts req.Argv in it. Its exit is watched
// from before the call, so Wait cannot miss it; Close the Sandbox when
// done with it.
func (c *Client) Create(ctx context.Context, req Request) (*Sandbox, error) {
	if len(req.Argv) == 0 && !req.Spec.Persistent {
		return nil, fmt.Errorf("create a sandbox: no command to run")
	}
	if req.Argv == nil {
		req.Argv = []string{}
	}
	if !c.conn.SupportsUnixFDs() {
		return nil, fmt.Errorf("create a sandbox: the bus connection cannot pass file descriptors")
	}
	fds, err := req.Stdio.fds()
	if err != nil {
		return nil, fmt.Errorf("create a sandbox: %w", err)
	}
	// The watch's AddMatch calls go out before CreateSandbox on the same
	// connection, and the bus handles a connection's messages in order:
	// the sandbox's exit cannot pass them. Their replies are read after
	// the create's, which saves the round trips.
	sb := &Sandbox{c: c}
	watched := sb.watch()
	var id string
	var path dbus.ObjectPath
	call := c.manager().CallWithContext(ctx, sodadapi.ManagerInterface+".CreateSandbox", 0,
		req.Profile, req.Argv, req.Spec.dict(req.Stdio.TTY != nil), fdsArg(fds), options(req.Interactive))
	if err := call.Store(&id, &path); err != nil {
		sb.Close()
		return nil, wrap(fmt.Sprintf("create a sandbox from profile %s", req.Profile), err)
	}
	sb.ID, sb.Path = id, path
	if err := watched(ctx); err != nil {
		// The sandbox runs, unwatched: Wait polls its State instead.
		sb.Close()
		sb.exited = nil
	}
	return sb, nil
}

// The match rules of a Sandbox's watch: sodad's SandboxExited, and sodad
// leaving (or coming back to) the bus.
const (
	exitedRule = "type='signal',sender='" + sodadapi.BusName + "',path='" + string(sodadapi.ManagerPath) +
		"',interface='" + sodadapi.ManagerInterface + "',member='SandboxExited'"
	goneRule = "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus'," +
		"member='NameOwnerChanged',arg0='" + sodadapi.BusName + "'"
)

// watch subscribes to SandboxExited and to sodad leaving the bus. It
// sends the AddMatch calls and returns at once; watched waits for their
// replies and says whether both matches are in place.
func (sb *Sandbox) watch() (watched func(context.Context) error) {
	conn := sb.c.conn
	bus := conn.BusObject()
	sb.exited = make(chan *dbus.Signal, 64)
	conn.Signal(sb.exited)
	rules := []string{exitedRule, goneRule}
	calls := make([]*dbus.Call, len(rules))
	for i, r := range rules {
		calls[i] = bus.Go("org.freedesktop.DBus.AddMatch", 0, make(chan *dbus.Call, 1), r)
	}
	sb.cancel = func() {
		conn.RemoveSignal(sb.exited)
		// Nothing waits on the replies: a process that ends next
		// need not wait for them, and its matches go with its
		// connection anyway.
		for _, r := range rules {
			bus.Go("org.freedesktop.DBus.RemoveMatch", dbus.FlagNoReplyExpected, nil, r)
		}
	}
	return func(ctx context.Context) error {
		for i, c := range calls {
			select {
			case <-c.Done:
				if c.Err != nil {
					return fmt.Errorf("watch sodad's signals (%s): %w", rules[i], c.Err)
				}
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}
}

// Close stops watching the sandbox; it does not end it.
func (sb *Sandbox) Close() {
	if sb.cancel != nil {
		sb.cancel()
		sb.cancel = nil
	}
}

func (sb *Sandbox) object() dbus.BusObject { return sb.c.conn.Object(sodadapi.BusName, sb.Path) }

// Exit is how a sandbox's command ended.
type Exit struct {
	Result string // success, exit-code, signal, timeout, oom-kill or supervisor-lost
	Status int32  // the exit status, or 128+signal; -1 if unknown
}

// ExitCode is the status sodactl run exits with: the command's, as in
// direct mode, and 125 (soda's own failure) when sodad lost the sandbox
// or reported no status.
func (e Exit) ExitCode() int {
	if e.Result == "supervisor-lost" || e.Status < 0 || e.Status > 255 {
		return 125
	}
	return int(e.Status)
}

// Wait returns once the sandbox's command has exited. It needs the
// watch Create sets up; a Sandbox from Open polls State instead.
func (sb *Sandbox) Wait(ctx context.Context) (Exit, error) {
	if sb.exited == nil {
		return sb.poll(ctx)
	}
	// The watch was in place before the sandbox existed: its exit, even
	// one signalled before the id was known, is in the channel.
	// gone is set while sodad is off the bus: a restarting sodad's
	// successor adopts the sandbox, and the wait goes on with it.
	var gone <-chan time.Time
	restartWait := sb.c.RestartWait
	if restartWait <= 0 {
		restartWait = DefaultRestartWait
	}
	for {
		select {
		case <-ctx.Done():
			return Exit{Status: -1}, ctx.Err()
		case <-gone:
			return Exit{Result: "supervisor-lost", Status: -1}, fmt.Errorf("wait for sandbox %s: %w (no successor within %s)", sb.ID, errNoExit, restartWait)
		case s, ok := <-sb.exited:
			if !ok {
				return Exit{Status: -1}, fmt.Errorf("wait for sandbox %s: the bus connection closed", sb.ID)
			}
			switch s.Name {
			case sodadapi.ManagerInterface + ".SandboxExited":
				var id, result string
				var path dbus.ObjectPath
				var status int32
				if dbus.Store(s.Body, &id, &path, &result, &status) == nil && id == sb.ID {
					return Exit{result, status}, nil
				}
			case "org.freedesktop.DBus.NameOwnerChanged":
				var name, old, owner string
				if dbus.Store(s.Body, &name, &old, &owner) != nil || name != sodadapi.BusName {
					continue
				}
				if owner == "" {
					if gone == nil {
						gone = time.After(restartWait)
					}
					continue
				}
				// A new sodad: it adopted the sandbox, or it says how
				// it ended, or it does not know it.
				gone = nil
				p, err := sb.Properties(ctx)
				switch {
				case err == nil && p.Exited():
					return Exit{p.Result, p.ExitStatus}, nil
				case err != nil:
					// The successor exports what it adopted before it
					// takes the name: it did not adopt this one.
					return Exit{Result: "supervisor-lost", Status: -1}, fmt.Errorf("wait for sandbox %s: %w (the new sodad did not adopt it: %v)", sb.ID, errNoExit, err)
				}
			}
		}
	}
}

// DefaultRestartWait is how long Wait waits for a successor when sodad
// leaves the bus before the sandbox has exited: a restart, or systemd
// restarting a sodad that crashed (RestartSec=1s), takes a few seconds.
const DefaultRestartWait = 30 * time.Second

// pollInterval is how often Wait without a watch, and FollowAudit, look.
const pollInterval = 250 * time.Millisecond

func (sb *Sandbox) poll(ctx context.Context) (Exit, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		p, err := sb.Properties(ctx)
		if err != nil {
			return Exit{Status: -1}, err
		}
		if p.Exited() {
			return Exit{p.Result, p.ExitStatus}, nil
		}
		select {
		case <-ctx.Done():
			return Exit{Status: -1}, ctx.Err()
		case <-t.C:
		}
	}
}

// ExecStatus is how an Exec'd command ended.
type ExecStatus struct {
	Code     int    // its exit status, 128+N for signal N
	Signal   string // the signal that killed it
	TimedOut bool   // killed at its time-out
	// ExecWith only: the sandbox's workspace had less than a page or no
	// inode free at one of its init's samples while the command ran (the
	// filesystem's word, not the output's; docs/dbus-api.md, ExecEx).
	WorkspaceFull bool
	// ExecWith only: processes the memory limit killed and forks the
	// task limit refused while it ran.
	MemoryKills, TasksRefused uint64
}

// ExecOptions are an ExecWith's options.
type ExecOptions struct {
	// Dir is the working directory inside the sandbox ("": its default).
	Dir string
	// Timeout kills the command (0: sodad's maximum, an hour).
	Timeout time.Duration
	// EndOthers: the call returns once everything the command left in
	// the sandbox is dead too (option end_others; sandbox.ExecSpec).
	EndOthers bool
}

// ExecWith runs argv in a persistent sandbox (Spec.Persistent) with the
// given streams (nil: /dev/null) and options, and returns how it ended,
// WorkspaceFull and the limit counters included (the ExecEx method).
func (sb *Sandbox) ExecWith(ctx context.Context, argv []string, o ExecOptions, stdio Stdio) (ExecStatus, error) {
	fds, err := stdio.fds()
	if err != nil {
		return ExecStatus{}, err
	}
	opts := execOptions(o.Dir, o.Timeout)
	if o.EndOthers {
		opts["end_others"] = dbus.MakeVariant(true)
	}
	// A bus call cannot be withdrawn: cancelling ctx closes the write end
	// of the cancel pipe, sodad kills the command (and what it left, with
	// EndOthers), and the call returns then, so that ExecWith never
	// returns while the command runs. The wait past ctx's end is bounded.
	cr, cw, err := os.Pipe()
	if err != nil {
		return ExecStatus{}, fmt.Errorf("exec %s in sandbox %s: cancel pipe: %w", argv[0], sb.ID, err)
	}
	defer cr.Close()
	var closeW sync.Once
	cancelCmd := func() { closeW.Do(func() { cw.Close() }) }
	defer cancelCmd()
	fds["cancel"] = dbus.UnixFD(cr.Fd())
	callCtx, stopCall := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCall()
	stopWatch := context.AfterFunc(ctx, func() {
		cancelCmd()
		t := time.NewTimer(cancelGrace)
		defer t.Stop()
		select {
		case <-t.C:
			stopCall()
		case <-callCtx.Done():
		}
	})
	defer stopWatch()
	var res map[string]dbus.Variant
	if err := sb.object().CallWithContext(callCtx, sodadapi.SandboxInterface+".ExecEx", 0, argv, opts, fdsArg(fds)).Store(&res); err != nil {
		if ctx.Err() != nil {
			return ExecStatus{}, fmt.Errorf("exec %s in sandbox %s: %w (and sodad did not answer within %s of the cancel)", argv[0], sb.ID, ctx.Err(), cancelGrace)
		}
		return ExecStatus{}, wrap(fmt.Sprintf("exec %s in sandbox %s", argv[0], sb.ID), err)
	}
	if err := ctx.Err(); err != nil {
		// Answered once sodad killed it: cancelled, whatever its status.
		return ExecStatus{}, fmt.Errorf("exec %s in sandbox %s: %w (the command was killed)", argv[0], sb.ID, err)
	}
	var st ExecStatus
	var code int32
	for k, dst := range map[string]any{"status": &code, "signal": &st.Signal, "timed_out": &st.TimedOut,
		"workspace_full": &st.WorkspaceFull, "memory_kills": &st.MemoryKills, "tasks_refused": &st.TasksRefused} {
		if v, ok := res[k]; ok {
			if err := v.Store(dst); err != nil {
				return ExecStatus{}, fmt.Errorf("exec %s in sandbox %s: result %s: %w", argv[0], sb.ID, k, err)
			}
		}
	}
	if _, ok := res["status"]; !ok {
		return ExecStatus{}, fmt.Errorf("exec %s in sandbox %s: the result has no status", argv[0], sb.ID)
	}
	st.Code = int(code)
	return st, nil
}

// cancelGrace bounds how long ExecWith waits for sodad's answer once its
// context ended (sodad kills the command then).
const cancelGrace = 30 * time.Second

// execOptions are Exec's and ExecWith's dir and timeout options.
func execOptions(dir string, timeout time.Duration) map[string]dbus.Variant {
	opts := map[string]dbus.Variant{}
	if dir != "" {
		opts["dir"] = dbus.MakeVariant(dir)
	}
	if timeout > 0 {
		opts["timeout"] = dbus.MakeVariant(uint64(timeout / time.Microsecond))
	}
	return opts
}

// Exec runs argv in a persistent sandbox (Spec.Persistent), in dir
// inside the sandbox ("": its default), with the given streams (nil:
// /dev/null), killed at timeout (0: sodad's maximum, an hour), and
// returns how it ended.
func (sb *Sandbox) Exec(ctx context.Context, argv []string, dir string, timeout time.Duration, stdio Stdio) (ExecStatus, error) {
	fds, err := stdio.fds()
	if err != nil {
		return ExecStatus{}, err
	}
	opts := execOptions(dir, timeout)
	var st ExecStatus
	var code int32
	err = sb.object().CallWithContext(ctx, sodadapi.SandboxInterface+".Exec", 0, argv, opts, fdsArg(fds)).Store(&code, &st.Signal, &st.TimedOut)
	if err != nil {
		return ExecStatus{}, wrap(fmt.Sprintf("exec %s in sandbox %s", argv[0], sb.ID), err)
	}
	st.Code = int(code)
	return st, nil
}

// Kill sends sig (1 to 64) to the sandbox's command.
func (sb *Sandbox) Kill(ctx context.Context, sig int32, interactive bool) error {
	err := sb.object().CallWithContext(ctx, sodadapi.SandboxInterface+".Kill", 0, sig, options(interactive)).Err
	return wrap(fmt.Sprintf("send signal %d to sandbox %s", sig, sb.ID), err)
}

// Grant adds target (HOST:PORT or mcp:NAME) to the live allow-list;
// private makes a HOST:PORT an AllowPrivate grant.
func (sb *Sandbox) Grant(ctx context.Context, target string, private, interactive bool) error {
	o := options(interactive)
	if private {
		o["private"] = dbus.MakeVariant(true)
	}
	err := sb.object().CallWithContext(ctx, sodadapi.SandboxInterface+".Grant", 0, target, o).Err
	return wrap(fmt.Sprintf("grant %s to sandbox %s", target, sb.ID), err)
}

// Revoke removes target from the live allow-list.
func (sb *Sandbox) Revoke(ctx context.Context, target string, interactive bool) error {
	err := sb.object().CallWithContext(ctx, sodadapi.SandboxInterface+".Revoke", 0, target, options(interactive)).Err
	return wrap(fmt.Sprintf("revoke %s from sandbox %s", target, sb.ID), err)
}

// MaxAuditRecords is the most ReadAudit returns at once.
const MaxAuditRecords = 1000

// ReadAudit returns up to max audit records (JSON lines) from cursor on
// (0: the oldest kept) and the cursor of the next one.
func (sb *Sandbox) ReadAudit(ctx context.Context, cursor uint64, max uint32) ([]string, uint64, error) {
	var recs []string
	var next uint64
	err := sb.object().CallWithContext(ctx, sodadapi.SandboxInterface+".ReadAudit", 0, cursor, max, options(false)).Store(&recs, &next)
	if err != nil {
		return nil, cursor, wrap(fmt.Sprintf("read the audit of sandbox %s", sb.ID), err)
	}
	return recs, next, nil
}

// FollowAudit hands each audit record from cursor on to fn; with follow
// it keeps polling while the sandbox runs (as the API reference says:
// the cursor, while watching State) and returns once it has exited and
// every record is read.
func (sb *Sandbox) FollowAudit(ctx context.Context, cursor uint64, follow bool, fn func(record string) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		// State first: records read after an exit was seen are the last.
		done := !follow
		if follow {
			p, err := sb.Properties(ctx)
			if err != nil {
				return err
			}
			done = p.Exited()
		}
		for {
			recs, next, err := sb.ReadAudit(ctx, cursor, MaxAuditRecords)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if err := fn(r); err != nil {
					return err
				}
			}
			if len(recs) == 0 || next == cursor {
				break
			}
			cursor = next
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Properties are a sandbox's D-Bus properties.
type Properties struct {
	ID             string            `json:"id"`
	OwnerUID       uint32            `json:"owner_uid"`
	Profile        string            `json:"profile"`
	Unit           string            `json:"unit"`
	Created        time.Time         `json:"created"`
	State          string            `json:"state"`
	MCP            []string          `json:"mcp"`
	Allow          []string          `json:"allow"`
	AllowPrivate   []string          `json:"allow_private"`
	ReadWritePaths []string          `json:"read_write_paths"`
	ReadOnlyPaths  []string          `json:"read_only_paths"`
	NoNetwork      bool              `json:"no_network"`
	Keys           []string          `json:"keys"`
	Image          string            `json:"image,omitempty"`
	ModelTokens    map[string]uint64 `json:"model_tokens,omitempty"`
	Limits         map[string]uint64 `json:"limits"`
	Result         string            `json:"result"`
	ExitStatus     int32             `json:"exit_status"`
	ExitedAt       time.Time         `json:"exited,omitzero"`
}

// Exited reports whether the command has ended.
func (p Properties) Exited() bool { return p.State == "exited" || p.State == "failed" }

// Properties reads the sandbox's properties (Properties.GetAll).
func (sb *Sandbox) Properties(ctx context.Context) (Properties, error) {
	var all map[string]dbus.Variant
	err := sb.object().CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, sodadapi.SandboxInterface).Store(&all)
	if err != nil {
		return Properties{}, wrap(fmt.Sprintf("read the properties of sandbox %s", sb.ID), err)
	}
	p := Properties{ExitStatus: -1}
	var created, exitedAt uint64
	fields := map[string]any{
		"Id": &p.ID, "OwnerUID": &p.OwnerUID, "Profile": &p.Profile, "Unit": &p.Unit,
		"CreatedTimestamp": &created, "State": &p.State, "MCP": &p.MCP, "Allow": &p.Allow,
		"AllowPrivate": &p.AllowPrivate, "ReadWritePaths": &p.ReadWritePaths, "ReadOnlyPaths": &p.ReadOnlyPaths,
		"NoNetwork": &p.NoNetwork, "Limits": &p.Limits, "Result": &p.Result, "ExitStatus": &p.ExitStatus,
		"ExitedTimestamp": &exitedAt, "Keys": &p.Keys, "ModelTokens": &p.ModelTokens, "Image": &p.Image,
	}
	for name, dst := range fields {
		v, ok := all[name]
		if !ok {
			continue
		}
		if err := dbus.Store([]any{v.Value()}, dst); err != nil {
			return Properties{}, fmt.Errorf("read the properties of sandbox %s: %s: %w", sb.ID, name, err)
		}
	}
	if created != 0 {
		p.Created = time.UnixMicro(int64(created))
	}
	if exitedAt != 0 {
		p.ExitedAt = time.UnixMicro(int64(exitedAt))
	}
	return p, nil
}
