package mcpgrant

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/runstate"
)

const (
	tok       = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	other     = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
	proxyPort = 3128
)

type fixture struct {
	conf, state, run string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := t.TempDir()
	f := fixture{conf: filepath.Join(root, "conf"), state: filepath.Join(root, "state"), run: filepath.Join(root, "run")}
	for _, d := range []string{f.conf, f.state, f.run} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(name, bridge string) {
		write(filepath.Join(f.conf, name+".conf"), "[Server]\nExecStart=/bin/cat\n\n[Bridge]\n"+bridge)
	}
	conf("jira", "Listen=127.0.0.1:18101\nTokenFile="+filepath.Join(f.state, "jira.token")+"\n")
	conf("gh", "Listen=[::1]:18102\nTokenFile="+filepath.Join(f.state, "gh.token")+"\n")
	conf("open", "Listen=localhost:18103\nAuth=none\n")
	conf("proxy", "Listen=127.0.0.1:3128\nAuth=none\n")
	write(filepath.Join(f.conf, "broken.conf"), "[Bridge]\nListen=10.0.0.1:80\n")
	write(filepath.Join(f.state, "jira.token"), tok+"\n")
	write(filepath.Join(f.state, "other.token"), other+"\n")
	start, err := runstate.ProcStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(name string, r runstate.Record) {
		t.Helper()
		if err := runstate.Write(filepath.Join(f.run, runstate.FileName(name)), r); err != nil {
			t.Fatal(err)
		}
	}
	// Started by hand, no NAME.conf: found by their runtime records.
	rec("everything", runstate.Record{PID: os.Getpid(), Start: start, Name: "everything",
		Listen: []string{"127.0.0.1:18100"}, Auth: true, TokenFile: filepath.Join(f.state, "jira.token")})
	rec("anon", runstate.Record{PID: os.Getpid(), Start: start, Name: "anon", Listen: []string{"127.0.0.1:18105"}})
	rec("unix", runstate.Record{PID: os.Getpid(), Start: start, Name: "unix"})
	return f
}

func TestGrant(t *testing.T) {
	f := newFixture(t)
	r := Resolver{ConfigDir: f.conf, RuntimeDirs: []string{f.run}}
	tests := []struct {
		name, server, tokenFile string
		wantPort                uint16
		wantURL, wantToken      string
		wantErr                 string
		wantGrantErr            bool // a *Error (the message does not name the server)
		wantNotExist            bool
	}{
		{name: "configured", server: "jira", wantPort: 18101, wantURL: "http://127.0.0.1:18101/mcp", wantToken: tok},
		{name: "configured on ::1", server: "gh", tokenFile: filepath.Join(f.state, "other.token"), wantPort: 18102, wantURL: "http://127.0.0.1:18102/mcp", wantToken: other},
		{name: "token file override", server: "jira", tokenFile: filepath.Join(f.state, "other.token"), wantPort: 18101, wantURL: "http://127.0.0.1:18101/mcp", wantToken: other},
		{name: "no authentication", server: "open", wantPort: 18103, wantURL: "http://127.0.0.1:18103/mcp"},
		{name: "no authentication ignores the token file", server: "open", tokenFile: "/nonexistent", wantPort: 18103, wantURL: "http://127.0.0.1:18103/mcp"},
		{name: "running, no NAME.conf", server: "everything", wantPort: 18100, wantURL: "http://127.0.0.1:18100/mcp", wantToken: tok},
		{name: "running without authentication", server: "anon", wantPort: 18105, wantURL: "http://127.0.0.1:18105/mcp"},
		{name: "unknown", server: "nosuch", wantGrantErr: true,
			wantErr: `soda-mcp@nosuch: no server "nosuch": ` + filepath.Join(f.conf, "nosuch.conf") + " does not exist, and no soda-mcpd of that name is running"},
		{name: "invalid name", server: "../etc", wantGrantErr: true, wantErr: "may only hold"},
		{name: "broken config", server: "broken", wantGrantErr: true, wantErr: "invalid configuration"},
		{name: "the proxy's port", server: "proxy", wantGrantErr: true, wantErr: "its port 3128 is the sandbox's proxy port"},
		{name: "running with no TCP address", server: "unix", wantGrantErr: true, wantErr: "serves no TCP address"},
		{name: "no token yet", server: "gh", wantErr: "no token yet for gh", wantNotExist: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := r.Grant(tt.server, proxyPort, tt.tokenFile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Grant = %+v, %v; want an error containing %q", g, err, tt.wantErr)
				}
				var ge *Error
				if errors.As(err, &ge) != tt.wantGrantErr || tt.wantGrantErr && ge.Name != tt.server {
					t.Errorf("error %v: a *Error %v (%+v), want %v", err, ge != nil, ge, tt.wantGrantErr)
				}
				if errors.Is(err, fs.ErrNotExist) != tt.wantNotExist {
					t.Errorf("errors.Is(%v, fs.ErrNotExist) != %v", err, tt.wantNotExist)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.Port != tt.wantPort || g.Entry.URL != tt.wantURL || g.Entry.Token != tt.wantToken || g.Entry.Name != tt.server {
				t.Errorf("Grant = %+v, want port %d, URL %s, token %q", g, tt.wantPort, tt.wantURL, tt.wantToken)
			}
		})
	}
}

// TestResolve: by NAME.conf, else by a live record, else an error, or
// with ResolveOrDefaults the defaults; Origin says which.
func TestResolve(t *testing.T) {
	f := newFixture(t)
	r := Resolver{ConfigDir: f.conf, RuntimeDirs: []string{f.run}}
	tests := []struct {
		name, server   string
		orDefaults     bool
		wantPath       bool // found by NAME.conf
		wantRecord     bool
		wantErr        string
		wantOriginHas  string
		wantListen     string
		wantAuthIsNone bool
	}{
		{name: "configured", server: "jira", wantPath: true, wantListen: "127.0.0.1:18101"},
		{name: "running", server: "everything", wantRecord: true, wantListen: "127.0.0.1:18100", wantOriginHas: "using the running soda-mcpd everything (pid"},
		{name: "running without auth", server: "anon", wantRecord: true, wantListen: "127.0.0.1:18105", wantAuthIsNone: true},
		{name: "unknown", server: "nosuch", wantErr: "no server \"nosuch\""},
		{name: "unknown, defaults", server: "nosuch", orDefaults: true, wantOriginHas: "assuming an ad-hoc soda-mcpd with the defaults"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolve := r.Resolve
			if tt.orDefaults {
				resolve = r.ResolveOrDefaults
			}
			got, err := resolve(tt.server)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.Config.Path != "") != tt.wantPath || (got.Record != nil) != tt.wantRecord {
				t.Errorf("path %q record %v, want path %v record %v", got.Config.Path, got.Record, tt.wantPath, tt.wantRecord)
			}
			if tt.wantListen != "" && got.Config.Bridge.Listen != tt.wantListen {
				t.Errorf("Listen %s, want %s", got.Config.Bridge.Listen, tt.wantListen)
			}
			if (got.Config.Bridge.Auth == "none") != tt.wantAuthIsNone {
				t.Errorf("Auth=%s", got.Config.Bridge.Auth)
			}
			if tt.wantOriginHas != "" && !strings.Contains(got.Origin(), tt.wantOriginHas) {
				t.Errorf("Origin() = %q, want %q", got.Origin(), tt.wantOriginHas)
			}
			if got.ConfigPath != filepath.Join(f.conf, tt.server+".conf") {
				t.Errorf("ConfigPath %s", got.ConfigPath)
			}
		})
	}
}

func TestPortsEntries(t *testing.T) {
	f := newFixture(t)
	r := Resolver{ConfigDir: f.conf, RuntimeDirs: []string{f.run}}
	var grants []Grant
	for _, n := range []string{"jira", "open", "everything"} {
		g, err := r.Grant(n, proxyPort, "")
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	if p := Ports(grants); len(p) != 3 || p[0] != 18101 || p[1] != 18103 || p[2] != 18100 {
		t.Errorf("Ports = %v", p)
	}
	e := Entries(grants)
	if len(e) != 3 || e[0].Name != "jira" || e[0].Token != tok || e[1].Token != "" || e[2].URL != "http://127.0.0.1:18100/mcp" {
		t.Errorf("Entries = %+v", e)
	}
	if len(Ports(nil)) != 0 || len(Entries(nil)) != 0 {
		t.Error("no grants, some ports or entries")
	}
}
