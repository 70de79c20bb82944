package sodad

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"

	"github.com/soda-project/soda/internal/metrics"
	"github.com/soda-project/soda/internal/polkit"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/systemd"
	"github.com/soda-project/soda/internal/version"
	"github.com/soda-project/soda/internal/workhome"
)

// Defaults of Config.
const (
	DefaultStateDir     = "/var/lib/soda/sodad"
	DefaultLinger       = time.Minute
	DefaultMaxSandboxes = 256
	DefaultMaxPerUser   = 32
	// auditKeep is how many audit records sodad keeps per sandbox for
	// ReadAudit; older ones are only in the journal.
	auditKeep = 10000
	// maxReadAudit is ReadAudit's largest max.
	maxReadAudit = 1000
)

// Config is what Run is built from.
type Config struct {
	// ProfileDir holds the profiles (profile.DefaultDir).
	ProfileDir string
	// ImageStore is the image store of the profiles' Image= (empty:
	// imagestore.DefaultDir for root, /var/lib/soda/images).
	ImageStore string
	// StateDir is sodad's state directory (DefaultStateDir): the records
	// and the sandboxes' homes.
	StateDir string
	// InitPath is soda-sandbox-init (sandbox.FindInit when empty).
	InitPath string
	// MCPConfigDir holds the MCP servers' NAME.conf (serverconf.DefaultDir).
	MCPConfigDir string
	// IdleExit ends sodad once no sandbox is alive and no call came for
	// that long (0: never); bus activation starts it again.
	IdleExit time.Duration
	// Linger is how long an exited sandbox's object stays on the bus for
	// its status to be read (DefaultLinger).
	Linger time.Duration
	// MaxSandboxes and MaxPerUser bound the live sandboxes.
	MaxSandboxes, MaxPerUser int
	// Log is the daemon's logger; Journal gets the audit and lifecycle
	// records (a journald handler; nil: Log).
	Log, Journal *slog.Logger
	// Conn is the system bus connection (nil: Run connects, with
	// closeStrayFds as its incoming interceptor).
	Conn *dbus.Conn
	// Authorizer replaces polkit (tests only; nil: polkit over Conn).
	Authorizer polkit.Authorizer
	// FDStore, when available, keeps each sandbox's host-side descriptors
	// across a restart of sodad (systemd's file descriptor store, see
	// sandbox.Sandbox.Handover); nil: a restart ends the sandboxes.
	FDStore *systemd.FDStore
	// Stored is what the store passed at this start (systemd.StoredFiles):
	// the predecessor's sandboxes, adopted by Run.
	Stored map[string][]*os.File
	// MetricsTextfile, when set, is where the Prometheus metrics of the
	// sandboxes are written every 5 s, for node_exporter's textfile
	// collector (sodad --metrics-textfile; metrics.TextfileDir).
	MetricsTextfile string
	// RestartPending says, when sodad is told to stop, whether it is
	// being restarted: then the live sandboxes are handed to the
	// successor instead of ended (nil: always ended).
	RestartPending func(context.Context) (bool, error)
}

func (c *Config) fill() error {
	if c.ProfileDir == "" {
		c.ProfileDir = profile.DefaultDir
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.MCPConfigDir == "" {
		c.MCPConfigDir = serverconf.DefaultDir
	}
	if c.Linger <= 0 {
		c.Linger = DefaultLinger
	}
	if c.MaxSandboxes <= 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.MaxPerUser <= 0 {
		c.MaxPerUser = DefaultMaxPerUser
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Journal == nil {
		c.Journal = c.Log
	}
	if c.InitPath == "" {
		p, err := sandbox.FindInit()
		if err != nil {
			return fmt.Errorf("soda-sandbox-init: %w", err)
		}
		c.InitPath = p
	}
	return nil
}

// Daemon is a running sodad.
type Daemon struct {
	cfg     Config
	metrics *metrics.Sandboxes // nil: off
	llm     *metrics.LLM       // the profiles' model gateways; nil: off
	log     *slog.Logger
	journal *slog.Logger
	conn    *dbus.Conn
	peers   Peers
	authz   authz
	engine  *sandbox.Linux
	store   *Store
	homes   *workhome.Dir
	mgr     *prop.Properties
	// run is the sandboxes' context: cancelled only once they are stopped.
	run context.Context

	mu       sync.Mutex
	boxes    map[string]*box
	draining bool
	live     sync.WaitGroup

	lastCall atomic.Int64 // unix nanoseconds of the last method call
}

// Run runs sodad until ctx ends (SIGTERM: drain) or it has been idle for
// cfg.IdleExit. A bus name held by another process is an error.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.fill(); err != nil {
		return err
	}
	log := cfg.Log
	store, err := OpenStore(cfg.StateDir)
	if err != nil {
		return err
	}
	defer store.Close()
	homes, err := workhome.Open(filepath.Join(cfg.StateDir, "homes"), 0)
	if err != nil {
		return fmt.Errorf("sandbox homes: %w", err)
	}

	d := &Daemon{cfg: cfg, log: log, journal: cfg.Journal, store: store, homes: homes, boxes: map[string]*box{}}
	d.touch()
	if cfg.MetricsTextfile != "" {
		reg := metrics.NewRegistry("sodad", version.Version)
		d.metrics = metrics.NewSandboxes(reg)
		d.llm = metrics.NewLLM(reg)
		if err := os.MkdirAll(filepath.Dir(cfg.MetricsTextfile), 0o755); err != nil {
			return fmt.Errorf("metrics textfile: %w", err)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		defer func() { close(stop); <-done }()
		go func() {
			defer close(done)
			reg.TextfileLoop(cfg.MetricsTextfile, metrics.TextfileInterval, stop, func(err error) { log.Warn("metrics textfile", "path", cfg.MetricsTextfile, "err", err) })
		}()
	}
	engine, err := sandbox.New(sandbox.Config{
		InitPath:   cfg.InitPath,
		Privileged: true,
		Cgroups:    sandbox.CgroupSystemd,
		Adoptable:  cfg.FDStore.Available(),
		Log:        log,
		Audit:      d.onAudit,
	})
	if err != nil {
		return fmt.Errorf("sandbox engine: %w", err)
	}
	defer engine.Close()
	d.engine = engine

	conn := cfg.Conn
	if conn == nil {
		if conn, err = dbus.ConnectSystemBus(dbus.WithIncomingInterceptor(strayFdCloser(d.hasSandbox))); err != nil {
			return fmt.Errorf("system bus: %w", err)
		}
		defer conn.Close()
	}
	d.conn, d.peers = conn, busPeers{conn}
	auth := cfg.Authorizer
	if auth == nil {
		auth = polkit.New(conn)
	}
	d.authz = authz{auth: auth, observe: func(action string, took time.Duration) {
		log.Debug("polkit check", "action", action, "took", took)
	}}
	if err := d.exportManager(); err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	d.run = runCtx
	d.recover(ctx)
	reply, err := conn.RequestName(sodadapi.BusName, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("own %s: %w", sodadapi.BusName, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("own %s: the name is taken (another sodad runs?)", sodadapi.BusName)
	}

	notify := systemd.NewNotifier(log)
	wctx, stopWatchdog := context.WithCancel(ctx)
	defer stopWatchdog()
	go func() {
		if err := notify.Watchdog(wctx, func() bool { return d.healthy() }); err != nil {
			log.Warn("watchdog", "err", err)
		}
	}()
	notify.Ready("serving " + sodadapi.BusName)
	log.Info("sodad ready", "name", sodadapi.BusName, "version", version.Version, "profiles", cfg.ProfileDir, "state", cfg.StateDir)

	reason := d.waitIdle(ctx)
	notify.Stopping(reason)
	log.Info("sodad stopping", "reason", reason)
	d.drain()
	stopRun()
	_, _ = conn.ReleaseName(sodadapi.BusName)
	return nil
}

// healthy is the watchdog's question: the daemon's lock is free, the bus
// answers and sodad still owns its name.
func (d *Daemon) healthy() bool {
	// Taking the lock is the check: a wedged one blocks here and skips the
	// ping, so that the watchdog fires.
	d.mu.Lock()
	//lint:ignore SA2001 the critical section is empty on purpose (above)
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var owner string
	err := d.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, sodadapi.BusName).Store(&owner)
	if err != nil || len(d.conn.Names()) == 0 || owner != d.conn.Names()[0] {
		d.log.Warn("watchdog: not healthy", "owner", owner, "err", err)
		return false
	}
	return true
}

// hasSandbox says whether path is a sandbox's object on the bus.
func (d *Daemon) hasSandbox(path dbus.ObjectPath) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.boxes {
		if b.path == path {
			return true
		}
	}
	return false
}

// touch records a method call (idle exit).
func (d *Daemon) touch() { d.lastCall.Store(time.Now().UnixNano()) }

// waitIdle returns when ctx ends or sodad has been idle for IdleExit.
func (d *Daemon) waitIdle(ctx context.Context) string {
	if d.cfg.IdleExit <= 0 {
		<-ctx.Done()
		return "stop requested"
	}
	tick := min(d.cfg.IdleExit/4, 10*time.Second)
	t := time.NewTicker(max(tick, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return "stop requested"
		case <-t.C:
			if d.aliveCount() == 0 && time.Since(time.Unix(0, d.lastCall.Load())) >= d.cfg.IdleExit {
				return fmt.Sprintf("idle for %s with no sandbox", d.cfg.IdleExit)
			}
		}
	}
}

// aliveCount is the number of sandboxes not yet ended.
func (d *Daemon) aliveCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, b := range d.boxes {
		if !b.ended() {
			n++
		}
	}
	return n
}

// drain refuses new sandboxes, then hands the live ones to the successor
// when sodad is being restarted (those whose descriptors are in the fd
// store: the successor adopts them) and ends the others.
func (d *Daemon) drain() {
	handOver := false
	if d.cfg.RestartPending != nil && d.cfg.FDStore.Available() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		restart, err := d.cfg.RestartPending(ctx)
		cancel()
		if err != nil {
			d.log.Warn("cannot tell a restart from a stop: the live sandboxes are ended", "err", err)
		}
		handOver = restart
	}
	d.mu.Lock()
	d.draining = true
	var live []*box
	for _, b := range d.boxes {
		if !b.ended() {
			live = append(live, b)
		}
	}
	d.mu.Unlock()
	d.mgr.SetMust(sodadapi.ManagerInterface, "Draining", true)
	for _, b := range live {
		if handOver && b.handedOver() {
			d.journal.Info("sandbox handed over: sodad restarting, its successor adopts it", "sandbox", b.id, "owner_uid", b.owner, "unit", b.unit)
			if sb := b.running(); sb != nil {
				sb.Detach()
			}
			continue
		}
		d.journal.Warn("sandbox ended: sodad stopping", "sandbox", b.id, "owner_uid", b.owner, "unit", b.unit)
		b.stopping.Store(true)
		if sb := b.running(); sb != nil {
			go sb.Stop()
		}
	}
	done := make(chan struct{})
	go func() { d.live.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		d.log.Error("sandboxes still running after 20 s of stopping", "count", d.aliveCount())
	}
}

// newID makes a sandbox id: the profile's name (its characters the id may
// hold, at most 40) and 8 random hex digits.
func newID(profileName string) string {
	var b strings.Builder
	for _, c := range profileName {
		if b.Len() >= 40 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	if b.Len() == 0 {
		b.WriteString("sandbox")
	}
	return b.String() + "-" + hex.EncodeToString(r[:])
}

// onAudit is the engine's audit function: each record goes to its
// sandbox's journal log and kept records.
func (d *Daemon) onAudit(r sandbox.Record) {
	d.mu.Lock()
	b := d.boxes[r.Sandbox]
	d.mu.Unlock()
	if b == nil {
		d.log.Warn("audit record of an unknown sandbox", "sandbox", r.Sandbox, "event", r.Event)
		return
	}
	b.audit.add(r)
	b.alog.Write(r)
	switch m := d.metrics; r.Event {
	case "start":
		m.Started(r.Sandbox, r.Time)
	case "ready":
		m.Ready(r.Sandbox, r.Time)
	case "refused":
		if b.running() == nil { // did not start (not the repository guard's refusals)
			m.Refused(r.Sandbox)
		}
	case "egress":
		if r.Egress != nil {
			m.Egress(r.Egress.Kind, r.Egress.Decision, r.Egress.Reason)
		}
	case "exit":
		if r.Exit != nil {
			m.Exited(r.Sandbox, r.Exit.Code, r.Exit.Signal, r.Exit.TimedOut, r.Exit.MemoryKills, r.Exit.TasksRefused, r.Exit.CPUThrottled)
		}
	}
}
