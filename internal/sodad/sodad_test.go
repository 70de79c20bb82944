package sodad

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/xml"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/polkit"
	"github.com/soda-project/soda/internal/profile"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sodadapi"
)

func v(x any) dbus.Variant { return dbus.MakeVariant(x) }

func TestDecodeSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    map[string]dbus.Variant
		errName string
		errHas  string
		check   func(t *testing.T, r request)
	}{
		{name: "empty takes the profile", spec: nil, check: func(t *testing.T, r request) {
			if r.MCP != nil || r.Allow != nil {
				t.Errorf("MCP %v Allow %v: want nil (the profile's)", r.MCP, r.Allow)
			}
		}},
		{name: "limits and grants", spec: map[string]dbus.Variant{"MemoryMax": v(uint64(1 << 30)), "Allow": v([]string{"api.github.com:443"}),
			"AllowPrivate": v([]string{"gitlab.internal:443"}), "MCP": v([]string{}), "TimeoutUSec": v(uint64(2_000_000)), "TTY": v(true)},
			check: func(t *testing.T, r request) {
				if r.Limits.MemoryMax != 1<<30 || r.Limits.Timeout != 2*time.Second || !r.TTY {
					t.Errorf("limits %+v tty %v", r.Limits, r.TTY)
				}
				if len(r.Allow) != 2 || !r.Allow[1].Private && !r.Allow[0].Private {
					t.Errorf("Allow %+v: want one public and one private grant", r.Allow)
				}
				if r.MCP == nil || len(r.MCP) != 0 {
					t.Errorf("MCP %v: want empty, not nil (none)", r.MCP)
				}
			}},
		{name: "identity claim", spec: map[string]dbus.Variant{"owner": v(uint32(0))}, errName: sodadapi.ErrorInvalidArgs, errHas: `"owner"`},
		{name: "uid claim", spec: map[string]dbus.Variant{"uid": v(uint32(0))}, errName: sodadapi.ErrorInvalidArgs, errHas: "from the bus"},
		{name: "unknown key", spec: map[string]dbus.Variant{"MemoryMx": v(uint64(1))}, errName: sodadapi.ErrorInvalidSpec, errHas: "MemoryMx"},
		{name: "wrong type", spec: map[string]dbus.Variant{"MemoryMax": v("4G")}, errName: sodadapi.ErrorInvalidSpec, errHas: "MemoryMax: want type t"},
		{name: "oversize", spec: map[string]dbus.Variant{"MemoryMax": v(uint64(1 << 63))}, errName: sodadapi.ErrorInvalidSpec, errHas: "MemoryMax"},
		{name: "too many", spec: map[string]dbus.Variant{"Allow": v(make([]string, maxListItems+1))}, errName: sodadapi.ErrorInvalidSpec, errHas: "Allow"},
		{name: "bad target", spec: map[string]dbus.Variant{"Allow": v([]string{"no-port"})}, errName: sodadapi.ErrorInvalidTarget, errHas: "no-port"},
		{name: "bad env", spec: map[string]dbus.Variant{"Environment": v([]string{"NOEQUALS"})}, errName: sodadapi.ErrorInvalidSpec, errHas: "Environment"},
		{name: "no network with grants", spec: map[string]dbus.Variant{"NoNetwork": v(true), "Allow": v([]string{"a.b:1"})}, errName: sodadapi.ErrorInvalidSpec, errHas: "NoNetwork"},
		{name: "per-run servers and masks", spec: map[string]dbus.Variant{
			"RunMCP": v([]sodadapi.RunServerEntry{{Name: "fs", Props: map[string]dbus.Variant{"Port": v(uint16(4242)), "Token": v("tok")}},
				{Name: "remote", Props: map[string]dbus.Variant{"URL": v("https://mcp.example.com/mcp"), "Headers": v(map[string]string{"X-Key": "k"})}},
				{Name: "inside", Props: map[string]dbus.Variant{"Command": v("npx"), "Args": v([]string{"-y", "srv"}), "Env": v(map[string]string{"A": "b"})}}}),
			"Masks": v([]sodadapi.Mask{{Path: "/srv/p/.mcp.json", Data: []byte("{}")}})},
			check: func(t *testing.T, r request) {
				if len(r.RunMCP) != 3 || r.RunMCP[0].Port != 4242 || r.RunMCP[0].Token != "tok" || r.RunMCP[1].Headers["X-Key"] != "k" ||
					r.RunMCP[2].Command != "npx" || r.RunMCP[2].Env["A"] != "b" || len(r.RunMCP[2].Args) != 2 {
					t.Errorf("RunMCP %+v", r.RunMCP)
				}
				if len(r.Masks) != 1 || r.Masks[0].Path != "/srv/p/.mcp.json" || string(r.Masks[0].Data) != "{}" {
					t.Errorf("Masks %+v", r.Masks)
				}
			}},
		// As godbus hands a message's structs over: []interface{} each,
		// in a variant whose signature says aav.
		{name: "per-run servers as decoded from the bus", spec: map[string]dbus.Variant{
			"RunMCP": v([][]any{{"fs", map[string]dbus.Variant{"Port": v(uint16(4242))}}})},
			check: func(t *testing.T, r request) {
				if len(r.RunMCP) != 1 || r.RunMCP[0].Name != "fs" || r.RunMCP[0].Port != 4242 {
					t.Errorf("RunMCP %+v", r.RunMCP)
				}
			}},
		{name: "per-run servers of the wrong shape", spec: map[string]dbus.Variant{"RunMCP": v([]string{"fs"})}, errName: sodadapi.ErrorInvalidSpec, errHas: "RunMCP: want type a(sa{sv})"},
		{name: "masks of the wrong shape", spec: map[string]dbus.Variant{"Masks": dbus.MakeVariantWithSignature([][]any{{"/a", uint32(5)}}, dbus.ParseSignatureMust("a(su)"))}, errName: sodadapi.ErrorInvalidSpec, errHas: "Masks: want type a(say)"},
		{name: "per-run server of two kinds", spec: map[string]dbus.Variant{"RunMCP": v([]sodadapi.RunServerEntry{{Name: "x", Props: map[string]dbus.Variant{"Port": v(uint16(1)), "Command": v("sh")}}})},
			errName: sodadapi.ErrorInvalidSpec, errHas: "exactly one of Port"},
		{name: "per-run server bad name", spec: map[string]dbus.Variant{"RunMCP": v([]sodadapi.RunServerEntry{{Name: "../x", Props: map[string]dbus.Variant{"Port": v(uint16(1))}}})},
			errName: sodadapi.ErrorInvalidSpec, errHas: `name "../x"`},
		{name: "per-run server unknown key", spec: map[string]dbus.Variant{"RunMCP": v([]sodadapi.RunServerEntry{{Name: "x", Props: map[string]dbus.Variant{"Prot": v(uint16(1))}}})},
			errName: sodadapi.ErrorInvalidSpec, errHas: "Prot: unknown key"},
		{name: "per-run server twice", spec: map[string]dbus.Variant{"RunMCP": v([]sodadapi.RunServerEntry{{Name: "x", Props: map[string]dbus.Variant{"Port": v(uint16(1))}}, {Name: "x", Props: map[string]dbus.Variant{"Port": v(uint16(2))}}})},
			errName: sodadapi.ErrorInvalidSpec, errHas: "named twice"},
		{name: "per-run without network", spec: map[string]dbus.Variant{"NoNetwork": v(true), "RunMCP": v([]sodadapi.RunServerEntry{{Name: "x", Props: map[string]dbus.Variant{"Port": v(uint16(1))}}})},
			errName: sodadapi.ErrorInvalidSpec, errHas: "NoNetwork"},
		{name: "mask relative", spec: map[string]dbus.Variant{"Masks": v([]sodadapi.Mask{{Path: "srv/.mcp.json", Data: nil}})}, errName: sodadapi.ErrorInvalidSpec, errHas: "absolute, clean"},
		{name: "mask oversize", spec: map[string]dbus.Variant{"Masks": v([]sodadapi.Mask{{Path: "/srv/a", Data: make([]byte, 1<<20+1)}})}, errName: sodadapi.ErrorInvalidSpec, errHas: "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeSpec(tc.spec)
			if tc.errName != "" {
				if err == nil || busError(err).Name != tc.errName || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want %s naming %q", err, tc.errName, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func TestDecodeOptionsAndArgv(t *testing.T) {
	if o, err := decodeOptions(map[string]dbus.Variant{"interactive": v(true)}); err != nil || !o.Interactive {
		t.Errorf("interactive: %+v %v", o, err)
	}
	if _, err := decodeOptions(map[string]dbus.Variant{"interactve": v(true)}); err == nil || busError(err).Name != sodadapi.ErrorInvalidArgs || !strings.Contains(err.Error(), "interactve") {
		t.Errorf("typo: %v", err)
	}
	if _, err := decodeOptions(map[string]dbus.Variant{"private": v(true)}); err == nil {
		t.Errorf("private on a method without it: accepted")
	}
	if o, err := decodeOptions(map[string]dbus.Variant{"private": v(true)}, "private"); err != nil || !o.Private {
		t.Errorf("private: %+v %v", o, err)
	}
	if err := decodeArgv(nil); err == nil {
		t.Errorf("empty argv accepted")
	}
	if err := decodeArgv(make([]string, maxArgs+1)); err == nil || busError(err).Name != sodadapi.ErrorInvalidSpec {
		t.Errorf("oversize argv: %v", err)
	}
}

func TestCheckFds(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	for _, tc := range []struct {
		name   string
		fds    map[string]*os.File
		tty    bool
		errHas string
	}{
		{"pipes", map[string]*os.File{"stdin": r, "stdout": w, "stderr": w}, false, ""},
		{"none", nil, false, ""},
		{"stdout read end", map[string]*os.File{"stdout": r}, false, "fd stdout: not open for writing"},
		{"stdin write end", map[string]*os.File{"stdin": w}, false, "fd stdin: not open for reading"},
		{"directory", map[string]*os.File{"stdin": dir}, false, "fd stdin: a directory"},
		{"pipe as tty", map[string]*os.File{"tty": r}, true, "fd tty: not a terminal"},
		{"unknown key", map[string]*os.File{"stdnull": r}, false, "fd stdnull: unknown key"},
		{"TTY without tty", map[string]*os.File{"stdin": r}, true, "fd tty"},
		{"life pipe", map[string]*os.File{"stdin": r, "life": r}, false, ""},
		// /dev/zero would make the watch spin; a file never hangs up.
		{"life not a pipe", map[string]*os.File{"life": zero}, false, "fd life: the read end of a pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkFds(tc.fds, tc.tty)
			if tc.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || busError(err).Name != sodadapi.ErrorInvalidFd || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want InvalidFd %q", err, tc.errHas)
			}
		})
	}
}

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "held by another sodad") {
		t.Fatalf("second OpenStore: %v, want the lock refused", err)
	}
	rec := Record{ID: "dev-1", OwnerUID: 1000, Profile: "dev", Unit: "soda-sandbox-dev-1.scope", Allow: []string{"a.b:443"}, Created: time.Unix(5, 0).UTC()}
	if err := s.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(Record{ID: "../x"}); err == nil {
		t.Errorf("record with an invalid id written")
	}
	if err := os.WriteFile(filepath.Join(dir, "sandboxes", "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, errs := s.List()
	if len(recs) != 1 || recs[0].ID != "dev-1" || recs[0].OwnerUID != 1000 || recs[0].Allow[0] != "a.b:443" {
		t.Errorf("List = %+v", recs)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "broken.json") {
		t.Errorf("List errors = %v, want broken.json named", errs)
	}
	if err := s.Remove("dev-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("dev-1"); err != nil {
		t.Errorf("removing a removed record: %v", err)
	}
	s.Close()
	s2, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("OpenStore after Close: %v", err)
	}
	s2.Close()
}

func TestAuditRing(t *testing.T) {
	a := newAuditRing(3)
	if recs, next := a.read(0, 10); len(recs) != 0 || next != 0 {
		t.Errorf("empty: %v %d", recs, next)
	}
	for i := uint64(1); i <= 5; i++ {
		a.add(sandbox.Record{Seq: i, Event: "egress"})
	}
	recs, next := a.read(0, 2)
	if len(recs) != 2 || !strings.Contains(recs[0], `"seq":3`) || next != 5 {
		t.Errorf("read(0,2) = %v, %d; want seq 3,4 and next 5", recs, next)
	}
	recs, next = a.read(next, 10)
	if len(recs) != 1 || !strings.Contains(recs[0], `"seq":5`) || next != 6 {
		t.Errorf("read(5) = %v, %d", recs, next)
	}
	if recs, n := a.read(next, 10); len(recs) != 0 || n != 6 {
		t.Errorf("read at the end = %v, %d", recs, n)
	}
	// Bounded in bytes too: large records push old ones out.
	b := newAuditRing(1 << 20)
	big := strings.Repeat("x", 64<<10)
	for i := uint64(1); i <= 100; i++ {
		b.add(sandbox.Record{Seq: i, Event: "egress", Detail: big})
	}
	if b.bytes > auditKeepBytes || len(b.recs) == 0 || b.recs[len(b.recs)-1].seq != 100 {
		t.Errorf("kept %d records, %d bytes (cap %d); last seq %d", len(b.recs), b.bytes, auditKeepBytes, b.recs[len(b.recs)-1].seq)
	}
}

// fakeAuth is a polkit stand-in: the answers per uid-less sender and
// action, and the checks asked.
type fakeAuth struct {
	answers map[string]polkit.Result // by Sender+" "+Action
	asked   []string
}

func (f *fakeAuth) CheckAuthorization(_ context.Context, c polkit.Check) (polkit.Result, error) {
	f.asked = append(f.asked, c.Sender+" "+c.Action)
	return f.answers[c.Sender+" "+c.Action], nil
}

func TestAuthorization(t *testing.T) {
	alice := caller{Sender: ":1.10", UID: 1000}
	bob := caller{Sender: ":1.11", UID: 1001}
	root := caller{Sender: ":1.1", UID: 0}
	yes := polkit.Result{Authorized: true}
	ask := polkit.Result{Challenge: true}
	no := polkit.Result{}
	f := &fakeAuth{answers: map[string]polkit.Result{
		":1.1 " + sodadapi.ActionExecOther: yes, ":1.1 " + sodadapi.ActionGrantOther: yes,
		":1.10 " + sodadapi.ActionExec: yes, ":1.10 " + sodadapi.ActionKill: no, ":1.10 " + sodadapi.ActionReadAudit: yes,
		":1.11 " + sodadapi.ActionExecOther: ask, ":1.11 " + sodadapi.ActionKillOther: no,
	}}
	a := authz{auth: f}
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		c           caller
		op          operation
		interactive bool
		wantErr     string
		wantAsked   []string
	}{
		{"owner execs in own", alice, opExec, false, "", []string{":1.10 " + sodadapi.ActionExec}},
		{"owner refused kill by a rule", alice, opKill, false, sodadapi.ErrorAccessDenied, []string{":1.10 " + sodadapi.ActionKill}},
		{"owner reads own audit", alice, opReadAudit, false, "", []string{":1.10 " + sodadapi.ActionReadAudit}},
		{"owner revokes: no action", alice, opRevoke, false, "", nil},
		{"other user exec", bob, opExec, false, sodadapi.ErrorInteractiveAuth, []string{":1.11 " + sodadapi.ActionExecOther}},
		{"other user exec interactive, refused", bob, opExec, true, sodadapi.ErrorAccessDenied, []string{":1.11 " + sodadapi.ActionExecOther}},
		{"other user kill refused", bob, opKill, false, sodadapi.ErrorAccessDenied, []string{":1.11 " + sodadapi.ActionKillOther}},
		{"root execs in another's", root, opExec, false, "", []string{":1.1 " + sodadapi.ActionExecOther}},
		{"root revokes on another's", root, opRevoke, false, "", []string{":1.1 " + sodadapi.ActionGrantOther}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.asked = nil
			err := a.owned(ctx, tc.c, alice.UID, tc.op, nil, tc.interactive)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || busError(err).Name != tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if strings.Join(f.asked, ",") != strings.Join(tc.wantAsked, ",") {
				t.Errorf("asked %v, want %v", f.asked, tc.wantAsked)
			}
		})
	}
}

func TestDecideCreate(t *testing.T) {
	p, err := profile.Parse("dev.conf", "dev", []byte("[Profile]\nUsers=1000\n[Grants]\nAllow=api.github.com:443\n[Limits]\nMemoryMax=2G\n"))
	if err != nil {
		t.Fatal(err)
	}
	alice := caller{UID: 1000}
	for _, tc := range []struct {
		name       string
		c          caller
		req        profile.Request
		wantAction string
		excessHas  string
	}{
		{"within", alice, profile.Request{}, sodadapi.ActionCreate, ""},
		{"memory beyond", alice, profile.Request{Limits: profile.Limits{MemoryMax: 8 << 30}}, sodadapi.ActionBeyondProfile, "MemoryMax"},
		{"not listed", caller{UID: 1001}, profile.Request{}, sodadapi.ActionBeyondProfile, "does not list uid 1001"},
		// Root gets no exception from the profile: polkit decides.
		{"root not listed", caller{UID: 0}, profile.Request{}, sodadapi.ActionBeyondProfile, "uid 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eff, action, details, err := decideCreate(p, tc.c, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if action != tc.wantAction || !strings.Contains(details["excess"], tc.excessHas) || details["profile"] != "dev" {
				t.Errorf("action %s details %v, want %s with excess %q", action, details, tc.wantAction, tc.excessHas)
			}
			if action == sodadapi.ActionCreate && eff.Limits.MemoryMax != 2<<30 {
				t.Errorf("effective MemoryMax %d, want the ceiling", eff.Limits.MemoryMax)
			}
		})
	}
	if _, _, _, err := decideCreate(p, alice, profile.Request{Limits: profile.Limits{MemoryMax: -1}}); err == nil || busError(err).Name != sodadapi.ErrorInvalidSpec {
		t.Errorf("negative limit: %v, want InvalidSpec", err)
	}
}

func TestNewID(t *testing.T) {
	for _, name := range []string{"dev", "a_b.c", strings.Repeat("x", 100), ""} {
		id := newID(name)
		if !validID(id) {
			t.Errorf("newID(%q) = %q: not a valid sandbox id", name, id)
		}
	}
}

func TestIntrospectionParses(t *testing.T) {
	for _, x := range []string{node(managerXML, []string{"sandbox"}), node(sandboxXML, nil), node("", []string{"a"})} {
		var n introspect.Node
		if err := xml.Unmarshal([]byte(x), &n); err != nil {
			t.Errorf("introspection does not parse: %v\n%s", err, x)
		}
	}
}

func TestCloseStrayFds(t *testing.T) {
	open := func() (int, func() bool) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		fd := int(w.Fd())
		// Detach the fd from w (as godbus holds a bare number).
		nfd, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		return nfd, func() bool { _, err := unix.FcntlInt(uintptr(nfd), unix.F_GETFD, 0); return err == nil }
	}
	call := func(path dbus.ObjectPath, iface, member string, body ...any) *dbus.Message {
		return &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath: dbus.MakeVariant(path), dbus.FieldInterface: dbus.MakeVariant(iface), dbus.FieldMember: dbus.MakeVariant(member),
		}, Body: body}
	}
	// A stray fd in Kill's options is closed.
	fd, isOpen := open()
	closeStrayFds(call(sodadapi.SandboxPath("a"), sodadapi.SandboxInterface, "Kill", int32(9), map[string]dbus.Variant{"x": dbus.MakeVariant(dbus.UnixFD(fd))}))
	if isOpen() {
		t.Errorf("an fd in Kill's options stayed open")
	}
	// CreateSandbox keeps its fds, not one hidden in spec.
	keep, keepOpen := open()
	stray, strayOpen := open()
	closeStrayFds(call(sodadapi.ManagerPath, sodadapi.ManagerInterface, "CreateSandbox", "dev", []string{"true"},
		map[string]dbus.Variant{"MemoryMax": dbus.MakeVariant(dbus.UnixFD(stray))},
		map[string]dbus.Variant{"stdin": dbus.MakeVariant(dbus.UnixFD(keep))}, map[string]dbus.Variant{}))
	if !keepOpen() {
		t.Errorf("CreateSandbox's fds argument was closed")
	}
	if strayOpen() {
		t.Errorf("an fd hidden in CreateSandbox's spec stayed open")
	}
	unix.Close(keep)
	// Exec and ExecEx keep their fds for a sandbox that exists, not for
	// one that does not (godbus answers that call itself).
	isBox := func(p dbus.ObjectPath) bool { return p == sodadapi.SandboxPath("a") }
	for _, tc := range []struct {
		member string
		path   dbus.ObjectPath
		keep   bool
	}{{"Exec", sodadapi.SandboxPath("a"), true}, {"Exec", sodadapi.SandboxPath("nope"), false}, {"ExecEx", sodadapi.SandboxPath("a"), true}, {"ExecEx", sodadapi.SandboxPath("nope"), false}} {
		fd, isOpen := open()
		strayFdCloser(isBox)(call(tc.path, sodadapi.SandboxInterface, tc.member, []string{"true"}, map[string]dbus.Variant{},
			map[string]dbus.Variant{"stdout": dbus.MakeVariant(dbus.UnixFD(fd))}))
		if isOpen() != tc.keep {
			t.Errorf("%s on %s: fd open %v, want %v", tc.member, tc.path, isOpen(), tc.keep)
		}
		if tc.keep {
			unix.Close(fd)
		}
	}
}

func TestCallerMayAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown the test directories")
	}
	// Below /tmp itself: t.TempDir's parent is closed to other users.
	base, err := os.MkdirTemp("", "sodad-access-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, uid, gid int, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mk("own", 1000, 1000, 0o700)
	group := mk("group", 0, 2000, 0o770)
	other := mk("other", 0, 0, 0o755)
	closed := mk("closed", 0, 0, 0o700)
	inner := filepath.Join(closed, "inner")
	if err := os.Mkdir(inner, 0o777); err != nil {
		t.Fatal(err)
	}
	alice := caller{UID: 1000, GIDs: []uint32{1000}}
	member := caller{UID: 1001, GIDs: []uint32{2000}}
	for _, tc := range []struct {
		name  string
		c     caller
		dir   string
		write bool
		ok    bool
	}{
		{"owner rw", alice, own, true, true},
		{"other user on a 0700 dir", member, own, false, false},
		{"group member rw", member, group, true, true},
		{"non-member on a 0770 dir", alice, group, false, false},
		{"everyone may read 0755", alice, other, false, true},
		{"nobody but root writes 0755", alice, other, true, false},
		{"a 0777 dir below a closed one", alice, inner, true, false},
		{"root", caller{UID: 0}, inner, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := callerMayAccess(tc.c, []string{tc.dir}, tc.write)
			if tc.ok && err != nil || !tc.ok && (err == nil || busError(err).Name != sodadapi.ErrorInvalidSpec) {
				t.Errorf("callerMayAccess(uid %d, %s, write=%v) = %v, want ok=%v", tc.c.UID, tc.dir, tc.write, err, tc.ok)
			}
		})
	}
}

func TestLoopbackListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
   3: 0100007F:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
`
	tests := []struct {
		port uint16
		want []uint32
	}{
		{0x1F90, []uint32{1001}}, // the established connection (state 01) is not a listener
		{0x1F91, nil},            // 0.0.0.0 is not 127.0.0.1
		{0x1F92, []uint32{0}},
		{0x1F93, nil},
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("host lacks: the table above is a little-endian host's")
	}
	for _, tt := range tests {
		got, err := loopbackListeners(bufio.NewScanner(strings.NewReader(table)), tt.port)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("port %d: %v, %v; want %v", tt.port, got, err, tt.want)
		}
	}
	// The live table: this test's own listener is its uid's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	if err := ownsLoopbackListener(uint32(os.Geteuid()), port); err != nil {
		t.Errorf("own listener: %v", err)
	}
	if err := ownsLoopbackListener(uint32(os.Geteuid())+1, port); err == nil || !strings.Contains(err.Error(), "not yours") {
		t.Errorf("another uid's listener: %v", err)
	}
	ln.Close()
	if err := ownsLoopbackListener(uint32(os.Geteuid()), port); err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Errorf("closed listener: %v", err)
	}
}

func TestMasksInside(t *testing.T) {
	grant, outside := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(grant, "in.json"), filepath.Join(outside, "out.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "out.json"), filepath.Join(grant, "link.json")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{filepath.Join(grant, "in.json"), true},
		{filepath.Join(outside, "out.json"), false},
		{filepath.Join(grant, "link.json"), false}, // leads out of the grant
		{filepath.Join(grant, "missing.json"), false},
	} {
		err := masksInside([]sandbox.Mask{{Path: tc.path}}, []string{grant})
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.path, err, tc.ok)
		}
	}
}
