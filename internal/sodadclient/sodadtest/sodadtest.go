// Package sodadtest plays sodad on a private bus for tests of its
// clients: StartBus runs a dbus-daemon of the test's own, and Fake
// implements the Manager and Sandbox objects of docs/dbus-api.md with
// scripted answers, recording what it was asked. It is no sodad: no
// sandbox runs, no polkit is asked.
package sodadtest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/dbustest"
	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/sodadclient"
)

// StartBus starts a dbus-daemon of its own (a session bus configuration
// in a temporary directory, as internal/polkit's tests do) and returns its
// address; with activatable its service directory names sodad's bus name
// (Exec=/bin/false), so the name is activatable without an owner. The test
// is skipped, saying why, without dbus-daemon.
func StartBus(t testing.TB, activatable bool) string {
	t.Helper()
	if activatable {
		return dbustest.PrivateBus(t, sodadapi.BusName)
	}
	return dbustest.PrivateBus(t)
}

// FD is what the fake learnt of an fd passed to CreateSandbox.
type FD struct {
	Dev, Ino uint64
	Mode     uint32 // st_mode
	Flags    int    // F_GETFL: O_RDONLY, O_WRONLY or O_RDWR
	Terminal bool
}

// Same reports whether f is the file fd refers to.
func (fd FD) Same(f *os.File) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return uint64(st.Dev) == fd.Dev && st.Ino == fd.Ino // Dev is int32 on macOS
}

// Created is one CreateSandbox call.
type Created struct {
	Profile string
	Argv    []string
	Spec    map[string]dbus.Variant
	FDs     map[string]FD
	Options map[string]dbus.Variant
}

// Call is one call of a Sandbox method.
type Call struct {
	ID, Method string
	Signal     int32
	Target     string
	Options    map[string]dbus.Variant
}

// Fake is a scripted sodad. Set its fields before Export; read what it
// recorded with Creates and Calls.
type Fake struct {
	// Profiles ListProfiles returns; CreateSandbox refuses others with
	// NoSuchProfile.
	Profiles []sodadclient.Profile
	// Output is written to the stdout (or tty) fd CreateSandbox gets.
	Output string
	// Exit is how each created sandbox ends, After its creation; with
	// UntilKilled it ends only when killed (status 128+signal).
	Exit        sodadclient.Exit
	After       time.Duration
	UntilKilled bool
	// CreateError, if set, is CreateSandbox's answer (an error name).
	CreateError string
	// Audit are the records ReadAudit serves, cursor i being Audit[i].
	Audit []string
	// KeepTTY keeps the tty fd of the last sandbox open until it exits,
	// for TTYWinsize.
	KeepTTY bool

	mu      sync.Mutex
	conn    *dbus.Conn
	creates []Created
	calls   []Call
	boxes   map[string]*box
	n       int
	created chan struct{}
	tty     int // kept with KeepTTY; 0: none
}

// TTYWinsize returns the window size of the tty kept with KeepTTY.
func (f *Fake) TTYWinsize() (rows, cols uint16, err error) {
	f.mu.Lock()
	fd := f.tty
	f.mu.Unlock()
	if fd == 0 {
		return 0, 0, fmt.Errorf("no tty kept")
	}
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, err
	}
	return ws.Row, ws.Col, nil
}

type box struct {
	f             *Fake
	id            string
	path          dbus.ObjectPath
	state, result string
	status        int32
	allow         []string
	exitedAt      uint64
}

// Export connects to the bus at addr, exports the Manager and owns
// sodad's name.
func (f *Fake) Export(t testing.TB, addr string) {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the private bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn, f.boxes, f.created = conn, map[string]*box{}, make(chan struct{}, 16)
	if err := conn.Export((*manager)(f), sodadapi.ManagerPath, sodadapi.ManagerInterface); err != nil {
		t.Fatal(err)
	}
	if r, err := conn.RequestName(sodadapi.BusName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s on the private bus: %v %v", sodadapi.BusName, r, err)
	}
}

// Leave gives up sodad's name, as a sodad that crashed.
func (f *Fake) Leave() error {
	_, err := f.conn.ReleaseName(sodadapi.BusName)
	return err
}

// Return owns sodad's name again, with the same sandboxes: a successor
// that adopted them.
func (f *Fake) Return() error {
	r, err := f.conn.RequestName(sodadapi.BusName, dbus.NameFlagDoNotQueue)
	if err == nil && r != dbus.RequestNameReplyPrimaryOwner {
		err = fmt.Errorf("request %s: reply %d", sodadapi.BusName, r)
	}
	return err
}

// CreatedCh receives once per sandbox created.
func (f *Fake) CreatedCh() <-chan struct{} { return f.created }

// Creates returns the CreateSandbox calls so far.
func (f *Fake) Creates() []Created {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Created(nil), f.creates...)
}

// Calls returns the Sandbox method calls so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

func dbusErr(name, format string, args ...any) *dbus.Error {
	return dbus.NewError(name, []any{fmt.Sprintf(format, args...)})
}

// manager is the Manager interface of Fake.
type manager Fake

// CreateSandbox takes its fds as a{sv}, variants holding an h, as sodad
// does (see sodadclient's fds.go).
func (m *manager) CreateSandbox(profile string, argv []string, spec map[string]dbus.Variant, fdv map[string]dbus.Variant, opts map[string]dbus.Variant) (string, dbus.ObjectPath, *dbus.Error) {
	f := (*Fake)(m)
	c := Created{Profile: profile, Argv: argv, Spec: spec, Options: opts, FDs: map[string]FD{}}
	fds := map[string]dbus.UnixFD{}
	for k, v := range fdv {
		fd, ok := v.Value().(dbus.UnixFD)
		if !ok {
			return "", "", dbusErr(sodadapi.ErrorInvalidFd, "fds %s holds %s, not a file descriptor", k, v.Signature())
		}
		fds[k] = fd
	}
	out := -1
	for k, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(int(fd), &st); err != nil {
			return "", "", dbusErr(sodadapi.ErrorInvalidFd, "fd %s: %v", k, err)
		}
		fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		c.FDs[k] = FD{Dev: uint64(st.Dev), Ino: st.Ino, Mode: uint32(st.Mode), Flags: fl & unix.O_ACCMODE, Terminal: isTerminal(int(fd))}
		if k == "stdout" || k == "tty" {
			out = int(fd)
		}
		if k == "tty" && f.KeepTTY {
			if d, err := unix.Dup(int(fd)); err == nil {
				f.mu.Lock()
				f.tty = d
				f.mu.Unlock()
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(int(fd))
		}
	}()
	f.mu.Lock()
	f.creates = append(f.creates, c)
	f.mu.Unlock()
	if f.CreateError != "" {
		return "", "", dbusErr(f.CreateError, "refused by the fake")
	}
	known := false
	for _, p := range f.Profiles {
		known = known || p.Name == profile
	}
	if !known {
		return "", "", dbusErr(sodadapi.ErrorNoSuchProfile, "no profile %s", profile)
	}
	if out >= 0 && f.Output != "" {
		if _, err := unix.Write(out, []byte(f.Output)); err != nil {
			return "", "", dbusErr(sodadapi.ErrorInvalidFd, "write to the command's output: %v", err)
		}
	}
	f.mu.Lock()
	f.n++
	id := fmt.Sprintf("%s-%d", profile, f.n)
	b := &box{f: f, id: id, path: sodadapi.ManagerPath + "/sandbox/" + dbus.ObjectPath(strings.ReplaceAll(id, "-", "_2d")), state: "running", status: -1}
	f.boxes[id] = b
	f.mu.Unlock()
	if err := f.conn.Export((*sandboxObj)(b), b.path, sodadapi.SandboxInterface); err != nil {
		return "", "", dbusErr("org.freedesktop.DBus.Error.Failed", "%v", err)
	}
	if err := f.conn.Export((*props)(b), b.path, "org.freedesktop.DBus.Properties"); err != nil {
		return "", "", dbusErr("org.freedesktop.DBus.Error.Failed", "%v", err)
	}
	if !f.UntilKilled {
		go func() {
			time.Sleep(f.After)
			b.exit(f.Exit.Result, f.Exit.Status)
		}()
	}
	f.created <- struct{}{}
	return id, b.path, nil
}

func (m *manager) GetSandbox(id string) (dbus.ObjectPath, *dbus.Error) {
	f := (*Fake)(m)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return "", dbusErr(sodadapi.ErrorNoSuchSandbox, "no sandbox %s", id)
	}
	return b.path, nil
}

type entry struct {
	ID      string
	Owner   uint32
	Profile string
	State   string
	Path    dbus.ObjectPath
}

func (m *manager) ListSandboxes() ([]entry, *dbus.Error) {
	f := (*Fake)(m)
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []entry{}
	for _, b := range f.boxes {
		out = append(out, entry{b.id, uint32(os.Getuid()), strings.SplitN(b.id, "-", 2)[0], b.state, b.path})
	}
	return out, nil
}

type profile struct{ Name, Description string }

func (m *manager) ListProfiles() ([]profile, *dbus.Error) {
	out := []profile{}
	for _, p := range m.Profiles {
		out = append(out, profile{p.Name, p.Description})
	}
	return out, nil
}

func (b *box) exit(result string, status int32) {
	b.f.mu.Lock()
	if b.state != "running" {
		b.f.mu.Unlock()
		return
	}
	b.state, b.result, b.status, b.exitedAt = "exited", result, status, uint64(time.Now().UnixMicro())
	if b.f.tty != 0 {
		unix.Close(b.f.tty)
		b.f.tty = 0
	}
	b.f.mu.Unlock()
	_ = b.f.conn.Emit(sodadapi.ManagerPath, sodadapi.ManagerInterface+".SandboxExited", b.id, b.path, result, status)
}

// sandboxObj is the Sandbox interface of one box.
type sandboxObj box

func (s *sandboxObj) record(c Call) {
	s.f.mu.Lock()
	c.ID = s.id
	s.f.calls = append(s.f.calls, c)
	s.f.mu.Unlock()
}

func (s *sandboxObj) Kill(sig int32, opts map[string]dbus.Variant) *dbus.Error {
	s.record(Call{Method: "Kill", Signal: sig, Options: opts})
	if sig < 1 || sig > 64 {
		return dbusErr("org.freedesktop.DBus.Error.InvalidArgs", "signal %d is not 1 to 64", sig)
	}
	if s.f.UntilKilled {
		go (*box)(s).exit("signal", 128+sig)
	}
	return nil
}

func (s *sandboxObj) Grant(target string, opts map[string]dbus.Variant) *dbus.Error {
	s.record(Call{Method: "Grant", Target: target, Options: opts})
	if !strings.Contains(target, ":") {
		return dbusErr(sodadapi.ErrorInvalidTarget, "target %q is not HOST:PORT or mcp:NAME", target)
	}
	s.f.mu.Lock()
	s.allow = append(s.allow, target)
	s.f.mu.Unlock()
	return nil
}

func (s *sandboxObj) Revoke(target string, opts map[string]dbus.Variant) *dbus.Error {
	s.record(Call{Method: "Revoke", Target: target, Options: opts})
	return nil
}

func (s *sandboxObj) ReadAudit(cursor uint64, max uint32, opts map[string]dbus.Variant) ([]string, uint64, *dbus.Error) {
	s.record(Call{Method: "ReadAudit", Options: opts})
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	recs := []string{}
	for i := cursor; i < uint64(len(s.f.Audit)) && len(recs) < int(max); i++ {
		recs = append(recs, s.f.Audit[i])
	}
	return recs, cursor + uint64(len(recs)), nil
}

// props is org.freedesktop.DBus.Properties of one box.
type props box

func (p *props) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != sodadapi.SandboxInterface {
		return nil, dbusErr("org.freedesktop.DBus.Error.UnknownInterface", "no interface %s", iface)
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	return map[string]dbus.Variant{
		"Id": dbus.MakeVariant(p.id), "OwnerUID": dbus.MakeVariant(uint32(os.Getuid())),
		"Profile": dbus.MakeVariant(strings.SplitN(p.id, "-", 2)[0]), "Unit": dbus.MakeVariant("soda-sandbox-" + p.id + ".scope"),
		"CreatedTimestamp": dbus.MakeVariant(uint64(1)), "State": dbus.MakeVariant(p.state),
		"MCP": dbus.MakeVariant([]string{}), "Allow": dbus.MakeVariant(append([]string{}, p.allow...)),
		"AllowPrivate": dbus.MakeVariant([]string{}), "ReadWritePaths": dbus.MakeVariant([]string{}),
		"ReadOnlyPaths": dbus.MakeVariant([]string{}), "NoNetwork": dbus.MakeVariant(false),
		"Limits": dbus.MakeVariant(map[string]uint64{"MemoryMax": 4 << 30}),
		"Result": dbus.MakeVariant(p.result), "ExitStatus": dbus.MakeVariant(p.status),
		"ExitedTimestamp": dbus.MakeVariant(p.exitedAt),
	}, nil
}

func (p *props) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	all, err := p.GetAll(iface)
	if err != nil {
		return dbus.Variant{}, err
	}
	v, ok := all[name]
	if !ok {
		return dbus.Variant{}, dbusErr("org.freedesktop.DBus.Error.UnknownProperty", "no property %s", name)
	}
	return v, nil
}
