package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
)

func TestLoadTerminated(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"GH_TOKEN": "ghp_real", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := envs[k]; return v, ok }
	grant := func(s ...string) sandbox.Spec {
		var spec sandbox.Spec
		for _, x := range s {
			g, err := egress.ParseGrant(x, false)
			if err != nil {
				t.Fatal(err)
			}
			spec.Egress.Allow = append(spec.Egress.Allow, g)
		}
		return spec
	}
	for _, tc := range []struct {
		name  string
		ro    runOptions
		spec  sandbox.Spec
		err   string
		hosts string // the terminated hosts
		env   string // the placeholders' names
	}{
		{name: "none"},
		{name: "from the environment", ro: runOptions{secret: repeatFlag{"GH_TOKEN@api.github.com:443"}}, spec: grant("api.github.com:443"),
			hosts: "api.github.com:443", env: "GH_TOKEN"},
		{name: "from a file, two hosts, a wildcard grant", ro: runOptions{secret: repeatFlag{"TOK=" + file + "@a.example.com:443,b.example.com:8443"}},
			spec: grant("*.example.com:443", "b.example.com:8443"), hosts: "a.example.com:443,b.example.com:8443", env: "TOK"},
		{name: "a rule alone", ro: runOptions{allowHTTP: repeatFlag{"GET api.github.com:443/repos/"}}, spec: grant("api.github.com:443"), hosts: "api.github.com:443"},
		{name: "not granted", ro: runOptions{secret: repeatFlag{"GH_TOKEN@api.github.com:443"}}, err: "add --allow api.github.com:443"},
		{name: "rule's host not granted", ro: runOptions{allowHTTP: repeatFlag{"GET x.example.com:443/"}}, err: "add --allow x.example.com:443"},
		{name: "no hosts", ro: runOptions{secret: repeatFlag{"GH_TOKEN"}}, err: "want NAME@HOST:PORT"},
		{name: "a domain", ro: runOptions{secret: repeatFlag{"GH_TOKEN@*.github.com:443"}}, err: "one host"},
		{name: "no value", ro: runOptions{secret: repeatFlag{"EMPTY@a.example.com:443"}}, spec: grant("a.example.com:443"), err: "no value: set EMPTY"},
		{name: "a value on the command line is not a file", ro: runOptions{secret: repeatFlag{"GH_TOKEN=ghp_x@a.example.com:443"}}, spec: grant("a.example.com:443"), err: "no such file"},
		{name: "a bad name", ro: runOptions{secret: repeatFlag{"9X@a.example.com:443"}}, err: "not a variable name"},
		{name: "a name the sandbox may not have", ro: runOptions{secret: repeatFlag{"LD_PRELOAD@a.example.com:443"}}, err: "may not have"},
		{name: "twice", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443", "GH_TOKEN@a.example.com:443"}}, spec: grant("a.example.com:443"), err: "given twice"},
		{name: "--env of the secret", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"GH_TOKEN"}}, spec: grant("a.example.com:443"), err: "drop --env GH_TOKEN"},
		{name: "--env holding the value", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"X=token ghp_real"}}, spec: grant("a.example.com:443"), err: "holds the --secret GH_TOKEN value"},
		{name: "--env of a CA variable", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"SSL_CERT_FILE=/x"}}, spec: grant("a.example.com:443"), err: "CA bundle"},
		{name: "bad rule", ro: runOptions{allowHTTP: repeatFlag{"get a.example.com:443/"}}, err: "upper-case"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term, err := loadTerminated(&tc.ro, &tc.spec, nil, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "ghp_real") {
					t.Fatalf("the error shows the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.hosts == "" {
				if term != nil {
					t.Fatal("a terminator without --secret or --allow-http")
				}
				return
			}
			if got := strings.Join(term.term.Hosts(), ","); got != tc.hosts {
				t.Errorf("hosts %s, want %s", got, tc.hosts)
			}
			var names []string
			for _, e := range term.env {
				k, v, _ := strings.Cut(e, "=")
				names = append(names, k)
				if !strings.HasPrefix(v, "soda-placeholder-") {
					t.Errorf("%s=%s is not a placeholder", k, v)
				}
			}
			if strings.Join(names, ",") != tc.env {
				t.Errorf("placeholders %v, want %s", names, tc.env)
			}
			spec := tc.spec
			if err := term.apply(&spec); err != nil {
				t.Fatal(err)
			}
			if len(spec.Masks) != 1 || !strings.Contains(string(spec.Masks[0].Data), string(term.term.CACert())) || spec.Terminate == nil {
				t.Errorf("apply: masks %d, terminate %v", len(spec.Masks), spec.Terminate != nil)
			}
		})
	}
}
