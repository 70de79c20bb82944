package agentrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/soda-project/soda/internal/clientconfig"
	"github.com/soda-project/soda/internal/mcpgrant"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/workhome"
)

func grant(name string, port uint16) mcpgrant.Grant {
	g := mcpgrant.Grant{Entry: clientconfig.Server{Name: name, Command: "srv"}, Port: port}
	if port != 0 {
		g.Entry = clientconfig.Server{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}
	}
	return g
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		servers []mcpgrant.Grant
		clash   string // the server named by the error; "" for none
	}{
		{"none", nil, ""},
		{"distinct", []mcpgrant.Grant{grant("a", 18101), grant("b", 18102), grant("c", 0), grant("d", 0)}, ""},
		{"proxy port", []mcpgrant.Grant{grant("a", 18101), grant("b", sandbox.DefaultProxyPort)}, "b"},
		{"same port", []mcpgrant.Grant{grant("a", 18101), grant("b", 18101)}, "b"},
		{"same name", []mcpgrant.Grant{grant("a", 18101), grant("a", 0)}, "a"},
		{"same name, no ports", []mcpgrant.Grant{grant("x", 0), grant("x", 0)}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.servers)
			var ce *ConflictError
			switch {
			case tt.clash == "" && err != nil:
				t.Fatalf("Check: %v, want none", err)
			case tt.clash != "" && !errors.As(err, &ce):
				t.Fatalf("Check: %v, want a *ConflictError", err)
			case tt.clash != "" && ce.Server != tt.clash:
				t.Fatalf("Check named %s (%v), want %s", ce.Server, err, tt.clash)
			}
		})
	}
}

// TestBuild: the recipe relays the servers' ports after the caller's,
// writes the agents' files in a new home it hands over, adjusts a known
// agent's command line (not a persistent sandbox's), keeps the caller's
// trusted environment, and leaves its input spec as it was.
func TestBuild(t *testing.T) {
	servers := []mcpgrant.Grant{
		{Entry: clientconfig.Server{Name: "jira", URL: "http://127.0.0.1:18101/mcp", Token: "t"}, Port: 18101},
		{Entry: clientconfig.Server{Name: "inside", Command: "srv"}},
		{Entry: clientconfig.Server{Name: "remote", URL: "https://mcp.example.com/mcp"}},
	}
	tests := []struct {
		name       string
		persistent bool
		argv       []string
		servers    []mcpgrant.Grant
		wantArgv   []string
		wantPorts  []uint16
		wantFiles  bool
	}{
		{"claude", false, []string{"claude", "-p", "hi"}, servers,
			[]string{"claude", "--mcp-config=" + sandbox.SandboxHome + "/.soda/mcp.json", "-p", "hi"}, []uint16{9, 18101}, true},
		{"other command", false, []string{"sh", "-c", "true"}, servers, []string{"sh", "-c", "true"}, []uint16{9, 18101}, true},
		{"no servers", false, []string{"claude"}, nil, []string{"claude"}, []uint16{9}, false},
		{"persistent", true, nil, servers, nil, []uint16{9, 18101}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			homes, err := workhome.Open(filepath.Join(t.TempDir(), "homes"), os.Geteuid())
			if err != nil {
				t.Fatal(err)
			}
			in := sandbox.Spec{Argv: tt.argv, Persistent: tt.persistent, TrustedEnv: []string{"A=1"}}
			in.Egress.MCPPorts = []uint16{9}
			spec, home, err := Build(homes, Recipe{Sandbox: in, Servers: tt.servers})
			if err != nil {
				t.Fatal(err)
			}
			defer home.Remove()
			if !slices.Equal(spec.Argv, tt.wantArgv) {
				t.Errorf("Argv = %q, want %q", spec.Argv, tt.wantArgv)
			}
			if !slices.Equal(spec.Egress.MCPPorts, tt.wantPorts) {
				t.Errorf("MCPPorts = %v, want %v", spec.Egress.MCPPorts, tt.wantPorts)
			}
			if !slices.Equal(in.Egress.MCPPorts, []uint16{9}) {
				t.Errorf("Build changed its input's MCPPorts: %v", in.Egress.MCPPorts)
			}
			if spec.Home != home.Path() {
				t.Errorf("Home = %q, want the home handed over, %q", spec.Home, home.Path())
			}
			if spec.TrustedEnv[0] != "A=1" {
				t.Errorf("TrustedEnv = %q: the caller's variables are lost", spec.TrustedEnv)
			}
			_, err = os.Stat(filepath.Join(home.Path(), ".soda/mcp.json"))
			if got := err == nil; got != tt.wantFiles {
				t.Errorf("agents' files written: %v, want %v (%v)", got, tt.wantFiles, err)
			}
			if tt.wantFiles && !slices.Contains(spec.TrustedEnv, EnvMCPConfig+"="+sandbox.SandboxHome+"/.soda/mcp.json") {
				t.Errorf("TrustedEnv = %q, want %s", spec.TrustedEnv, EnvMCPConfig)
			}
		})
	}
}

// TestBuildFailsClean: a recipe that clashes leaves no home behind.
func TestBuildFailsClean(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "homes")
	homes, err := workhome.Open(dir, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	clash := []mcpgrant.Grant{grant("a", 18101), grant("b", 18101)}
	if _, h, err := Build(homes, Recipe{Sandbox: sandbox.Spec{Argv: []string{"claude"}}, Servers: clash}); err == nil || h != nil {
		t.Fatalf("Build of a clash: home %v, err %v; want an error and no home", h, err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("a failed Build left %d homes in %s", len(es), dir)
	}
}
