package sodadclient_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sodadapi"
	"github.com/soda-project/soda/internal/sodadclient"
	"github.com/soda-project/soda/internal/sodadclient/sodadtest"
)

func client(t *testing.T, addr string) *sodadclient.Client {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("connect to the private bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return sodadclient.New(conn)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestAvailable: sodad is there when its name is owned or activatable,
// not otherwise.
func TestAvailable(t *testing.T) {
	tests := []struct {
		name              string
		activatable, owns bool
		want              bool
	}{
		{"absent", false, false, false},
		{"activatable", true, false, true},
		{"owned", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := sodadtest.StartBus(t, tt.activatable)
			if tt.owns {
				(&sodadtest.Fake{}).Export(t, addr)
			}
			got, err := client(t, addr).Available(ctx(t))
			if err != nil || got != tt.want {
				t.Fatalf("Available = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestDetectNoBus: no system bus at all is an error, not a hang.
func TestDetectNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	c, ok, err := sodadclient.Detect(context.Background(), 2*time.Second)
	if err == nil || ok || c != nil {
		t.Fatalf("Detect = %v, %v, %v; want an error", c, ok, err)
	}
}

// stdio returns three files standing for the caller's streams.
func stdio(t *testing.T) (in, out, errf *os.File) {
	t.Helper()
	dir := t.TempDir()
	open := func(name string, flag int) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), flag|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return open("in", os.O_RDONLY), open("out", os.O_WRONLY), open("err", os.O_WRONLY)
}

// TestCreateWait: the streams reach sodad as the very files (same inode,
// their access modes), the spec and options as the reference spells them,
// and the command's exit status comes back.
func TestCreateWait(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, Output: "hello from the sandbox\n",
		Exit: sodadclient.Exit{Result: "exit-code", Status: 3}}
	fake.Export(t, addr)
	c := client(t, addr)
	in, out, errf := stdio(t)
	sb, err := c.Create(ctx(t), sodadclient.Request{
		Profile: "dev", Argv: []string{"agent", "--flag"}, Interactive: true,
		Stdio: sodadclient.Stdio{Stdin: in, Stdout: out, Stderr: errf},
		Spec: sodadclient.Spec{MCP: []string{}, Allow: []string{"api.github.com:443"}, MemoryMax: 1 << 30,
			Timeout: 90 * time.Second, Environment: []string{"TERM=xterm"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if sb.ID != "dev-1" || !strings.HasSuffix(string(sb.Path), "/sandbox/dev_2d1") {
		t.Errorf("created %s at %s", sb.ID, sb.Path)
	}
	exit, err := sb.Wait(ctx(t))
	if err != nil || exit.ExitCode() != 3 || exit.Result != "exit-code" {
		t.Fatalf("Wait = %+v, %v; want exit-code 3", exit, err)
	}

	cr := fake.Creates()[0]
	if cr.Profile != "dev" || !slices.Equal(cr.Argv, []string{"agent", "--flag"}) {
		t.Errorf("created %q %q", cr.Profile, cr.Argv)
	}
	for _, f := range []struct {
		key  string
		file *os.File
		mode int
	}{{"stdin", in, unix.O_RDONLY}, {"stdout", out, unix.O_WRONLY}, {"stderr", errf, unix.O_WRONLY}} {
		got, ok := cr.FDs[f.key]
		if !ok || !got.Same(f.file) || got.Flags != f.mode {
			t.Errorf("fd %s = %+v (present %v); want the caller's %s, access mode %d", f.key, got, ok, f.file.Name(), f.mode)
		}
	}
	if len(cr.FDs) != 3 {
		t.Errorf("fds %v; want stdin, stdout, stderr", cr.FDs)
	}
	if b, _ := os.ReadFile(out.Name()); string(b) != "hello from the sandbox\n" {
		t.Errorf("stdout holds %q", b)
	}
	wantSpec := map[string]any{"MCP": []string{}, "Allow": []string{"api.github.com:443"}, "MemoryMax": uint64(1 << 30),
		"TimeoutUSec": uint64(90e6), "Environment": []string{"TERM=xterm"}}
	if len(cr.Spec) != len(wantSpec) {
		t.Errorf("spec %v; want the keys of %v only (left out: the profile's)", cr.Spec, wantSpec)
	}
	for k, v := range wantSpec {
		if got, ok := cr.Spec[k]; !ok || got.String() != dbus.MakeVariant(v).String() {
			t.Errorf("spec %s = %v; want %v", k, got, v)
		}
	}
	if v, ok := cr.Options["interactive"]; !ok || v.Value() != true || len(cr.Options) != 1 {
		t.Errorf("options %v; want interactive true", cr.Options)
	}
}

// TestCreateTTY: a pty's slave is passed alone as tty, with TTY in the
// spec; what the command writes reaches the master.
func TestCreateTTY(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, Output: "on a tty",
		Exit: sodadclient.Exit{Result: "success", Status: 0}}
	fake.Export(t, addr)
	master, slave, err := sodadclient.OpenPTY()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer master.Close()
	sb, err := client(t, addr).Create(ctx(t), sodadclient.Request{Profile: "dev", Argv: []string{"sh"}, Stdio: sodadclient.Stdio{TTY: slave}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	slave.Close()
	cr := fake.Creates()[0]
	if fd, ok := cr.FDs["tty"]; !ok || !fd.Terminal || len(cr.FDs) != 1 || cr.Spec["TTY"].Value() != true {
		t.Errorf("fds %+v spec %v; want tty alone, a terminal, and TTY", cr.FDs, cr.Spec)
	}
	buf := make([]byte, 64)
	n, _ := master.Read(buf)
	if !strings.Contains(string(buf[:n]), "on a tty") {
		t.Errorf("master read %q", buf[:n])
	}
	if exit, err := sb.Wait(ctx(t)); err != nil || exit.ExitCode() != 0 {
		t.Errorf("Wait = %+v, %v", exit, err)
	}
}

// TestErrors: sodad's D-Bus errors keep their name and say what to do.
func TestErrors(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, UntilKilled: true}
	fake.Export(t, addr)
	c := client(t, addr)

	_, err := c.Create(ctx(t), sodadclient.Request{Profile: "nosuch", Argv: []string{"true"}})
	if sodadclient.ErrorName(err) != sodadapi.ErrorNoSuchProfile || !errors.Is(err, sodadclient.ErrNoSuchProfile) ||
		!strings.Contains(err.Error(), "create a sandbox from profile nosuch: no profile nosuch") ||
		!strings.Contains(err.Error(), "'sodactl sandbox profiles' lists the profiles you may use") {
		t.Errorf("unknown profile: %v", err)
	}
	if _, err := c.Open(ctx(t), "gone"); sodadclient.ErrorName(err) != sodadapi.ErrorNoSuchSandbox || !errors.Is(err, sodadclient.ErrNoSuchSandbox) || !strings.Contains(err.Error(), "sodactl sandbox list") {
		t.Errorf("unknown sandbox: %v", err)
	}
	sb, err := c.Create(ctx(t), sodadclient.Request{Profile: "dev", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.Grant(ctx(t), "nonsense", false, false); sodadclient.ErrorName(err) != sodadapi.ErrorInvalidTarget || !errors.Is(err, sodadclient.ErrInvalidTarget) || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("bad target: %v", err)
	}

	fake2 := &sodadtest.Fake{CreateError: sodadapi.ErrorInteractiveAuth}
	addr2 := sodadtest.StartBus(t, false)
	fake2.Export(t, addr2)
	_, err = client(t, addr2).Create(ctx(t), sodadclient.Request{Profile: "dev", Argv: []string{"true"}})
	if !errors.Is(err, sodadclient.ErrInteractiveAuth) || !strings.Contains(err.Error(), "run it on a terminal") {
		t.Errorf("interactive authorization: %v", err)
	}
}

// TestKillGrantAudit: Kill ends a sandbox with 128+signal, grants and
// revokes reach sodad with their options, the audit is read by cursor.
func TestKillGrantAudit(t *testing.T) {
	addr := sodadtest.StartBus(t, false)
	fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev", Description: "Developers"}}, UntilKilled: true,
		Audit: []string{`{"n":0}`, `{"n":1}`, `{"n":2}`}}
	fake.Export(t, addr)
	c := client(t, addr)
	sb, err := c.Create(ctx(t), sodadclient.Request{Profile: "dev", Argv: []string{"sleep", "1d"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()

	if got, err := c.ListProfiles(ctx(t)); err != nil || len(got) != 1 || got[0] != (sodadclient.Profile{Name: "dev", Description: "Developers"}) {
		t.Errorf("ListProfiles = %v, %v", got, err)
	}
	if got, err := c.List(ctx(t)); err != nil || len(got) != 1 || got[0].ID != sb.ID || got[0].State != "running" || got[0].Path != sb.Path {
		t.Errorf("List = %v, %v", got, err)
	}
	opened, err := c.Open(ctx(t), sb.ID)
	if err != nil || opened.Path != sb.Path {
		t.Fatalf("Open = %v, %v", opened, err)
	}
	if err := opened.Grant(ctx(t), "pypi.org:443", true, true); err != nil {
		t.Fatal(err)
	}
	if err := opened.Revoke(ctx(t), "pypi.org:443", false); err != nil {
		t.Fatal(err)
	}
	p, err := opened.Properties(ctx(t))
	if err != nil || p.State != "running" || p.ExitStatus != -1 || !slices.Equal(p.Allow, []string{"pypi.org:443"}) || p.Limits["MemoryMax"] != 4<<30 {
		t.Errorf("Properties = %+v, %v", p, err)
	}
	var recs []string
	if err := opened.FollowAudit(ctx(t), 1, false, func(r string) error { recs = append(recs, r); return nil }); err != nil || !slices.Equal(recs, fake.Audit[1:]) {
		t.Errorf("audit from cursor 1 = %q, %v", recs, err)
	}

	// --follow returns once the sandbox has exited.
	followed := make(chan error, 1)
	go func() { followed <- opened.FollowAudit(ctx(t), 0, true, func(string) error { return nil }) }()
	if err := opened.Kill(ctx(t), 15, false); err != nil {
		t.Fatal(err)
	}
	exit, err := sb.Wait(ctx(t))
	if err != nil || exit.Result != "signal" || exit.ExitCode() != 143 {
		t.Errorf("Wait after Kill 15 = %+v, %v; want 143", exit, err)
	}
	if err := <-followed; err != nil {
		t.Errorf("FollowAudit: %v", err)
	}
	if exit, err := opened.Wait(ctx(t)); err != nil || exit.ExitCode() != 143 {
		t.Errorf("Wait (polling) = %+v, %v", exit, err)
	}
	calls := fake.Calls()
	var grant, revoke sodadtest.Call
	for _, c := range calls {
		switch c.Method {
		case "Grant":
			grant = c
		case "Revoke":
			revoke = c
		}
	}
	if grant.Target != "pypi.org:443" || grant.Options["private"].Value() != true || grant.Options["interactive"].Value() != true {
		t.Errorf("Grant call %+v", grant)
	}
	if revoke.Target != "pypi.org:443" || len(revoke.Options) != 0 {
		t.Errorf("Revoke call %+v", revoke)
	}
}

// TestSodadLeaves: a sodad that leaves the bus while the command runs
// ends Wait with supervisor-lost, exit code 125, when no successor comes;
// with a successor that adopted the sandbox, Wait goes on and gets its
// exit.
func TestSodadLeaves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		successor bool
	}{{"no successor", false}, {"successor adopts", true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := sodadtest.StartBus(t, false)
			fake := &sodadtest.Fake{Profiles: []sodadclient.Profile{{Name: "dev"}}, UntilKilled: true}
			fake.Export(t, addr)
			c := client(t, addr)
			c.RestartWait = 2 * time.Second
			sb, err := c.Create(ctx(t), sodadclient.Request{Profile: "dev", Argv: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			if err := fake.Leave(); err != nil {
				t.Fatal(err)
			}
			if tc.successor {
				go func() {
					time.Sleep(300 * time.Millisecond)
					if err := fake.Return(); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(100 * time.Millisecond)
					if err := sb.Kill(context.Background(), 15, false); err != nil {
						t.Error(err)
					}
				}()
			}
			exit, err := sb.Wait(ctx(t))
			if tc.successor {
				if err != nil || exit.ExitCode() != 143 {
					t.Errorf("Wait = %+v, %v; want 143 from the successor", exit, err)
				}
				return
			}
			if err == nil || exit.ExitCode() != 125 || !strings.Contains(err.Error(), "sodad left the bus") || !strings.Contains(err.Error(), "no successor") {
				t.Errorf("Wait = %+v, %v", exit, err)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		exit sodadclient.Exit
		want int
	}{
		{sodadclient.Exit{"success", 0}, 0},
		{sodadclient.Exit{"exit-code", 1}, 1},
		{sodadclient.Exit{"exit-code", 127}, 127},
		{sodadclient.Exit{"signal", 137}, 137},
		{sodadclient.Exit{"timeout", 143}, 143},
		{sodadclient.Exit{"supervisor-lost", 0}, 125},
		{sodadclient.Exit{"", -1}, 125},
	}
	for _, tt := range tests {
		if got := tt.exit.ExitCode(); got != tt.want {
			t.Errorf("%+v.ExitCode() = %d, want %d", tt.exit, got, tt.want)
		}
	}
}
