//go:build !soda_lean

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/validate"
)

// TestValidateCommands: "sodactl validate token|client-config KIND" read
// what soda-validated writes in a temporary state directory: the running
// worker's address and token file from its owner record, else Listen= of
// KIND.conf and STATE/KIND/token.
//
//	conf/shellcheck.conf  Listen=127.0.0.1:18120; state/shellcheck/token
//	conf/running.conf     Listen=127.0.0.1:18121; a live owner record
//	                      serving 127.0.0.1:40001 with state/run.token
//	conf/stdio.conf       no Listen=
//	conf/fresh.conf       Listen=127.0.0.1:18122, no token yet
func TestValidateCommands(t *testing.T) {
	root := t.TempDir()
	conf, state := filepath.Join(root, "conf"), filepath.Join(root, "state")
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	kind := func(name, listen string) {
		s := "[Validator]\nExecStart=/usr/bin/shellcheck %FILES%\nFiles=*.sh\n"
		if listen != "" {
			s += "[Listener]\nListen=" + listen + "\n"
		}
		write(filepath.Join(conf, name+".conf"), s, 0o644)
	}
	kind("shellcheck", "127.0.0.1:18120")
	kind("running", "127.0.0.1:18121")
	kind("stdio", "")
	kind("fresh", "127.0.0.1:18122")
	write(validate.TokenPath(state, "shellcheck"), tok+"\n", 0o600)
	other := strings.Repeat("e", 64)
	runTok := filepath.Join(state, "run.token")
	write(runTok, other+"\n", 0o600)
	start, err := runstate.ProcStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(validate.OwnerRecord{Kind: "running", PID: os.Getpid(), ProcStart: start, Listen: []string{"127.0.0.1:40001"}, TokenFile: runTok})
	write(validate.OwnerRecordPath(state, "running"), string(rec), 0o600)

	dirs := []string{"--config-dir", conf, "--state-dir", state}
	with := func(args ...string) []string { return append(append([]string{"validate"}, args...), dirs...) }
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stdoutHas []string
		stderrHas []string
	}{
		{name: "help", args: []string{"validate", "--help"}, code: 0, stdoutHas: []string{"sodactl validate token [OPTIONS] KIND", "/var/lib/soda/validate/KIND/token"}},
		{name: "root help names it", args: []string{"--help"}, code: 0, stdoutHas: []string{"validate token KIND", "validate client-config KIND"}},
		{name: "alone", args: []string{"validate"}, code: 2, stderrHas: []string{"missing command", "sodactl validate --help"}},
		{name: "unknown", args: []string{"validate", "frob"}, code: 2, stderrHas: []string{`unknown command "frob"`}},
		{name: "token no kind", args: with("token"), code: 2, stderrHas: []string{"missing validator KIND"}},
		{name: "token bad kind", args: with("token", "../etc"), code: 2, stderrHas: []string{"may only hold"}},

		{name: "token", args: with("token", "shellcheck"), code: 0, stdout: tok + "\n"},
		{name: "token flags first", args: append(append([]string{"validate"}, dirs...), "token", "shellcheck"), code: 0, stdout: tok + "\n"},
		{name: "token of the running worker", args: with("token", "running"), code: 0, stdout: other + "\n"},
		{name: "token --token-file", args: with("token", "shellcheck", "--token-file", runTok), code: 0, stdout: other + "\n"},
		{name: "token not yet", args: with("token", "fresh"), code: 1, stderrHas: []string{
			"no token yet for soda-validate@fresh", validate.TokenPath(state, "fresh"), "systemctl start soda-validate@fresh.socket"}},

		{name: "client-config", args: with("client-config", "shellcheck", "--client", "claude"), code: 0,
			stdout:    `claude mcp add --transport http validate-shellcheck http://127.0.0.1:18120/mcp --header "Authorization: Bearer ` + tok + `"` + "\n",
			stderrHas: []string{"shell", "Listen= of " + filepath.Join(conf, "shellcheck.conf")}},
		{name: "client-config of the running worker", args: with("client-config", "running", "--client", "codex"), code: 0,
			stdout:    "[mcp_servers.validate-running]\nurl = \"http://127.0.0.1:40001/mcp\"\nhttp_headers = { \"Authorization\" = \"Bearer " + other + "\" }\n",
			stderrHas: []string{"the running soda-validated running (pid"}},
		{name: "client-config no listener", args: with("client-config", "stdio", "--client", "claude"), code: 1,
			stderrHas: []string{"no HTTP address", filepath.Join(conf, "stdio.conf") + " has no [Listener] Listen="}},
		{name: "client-config unconfigured", args: with("client-config", "nope", "--client", "claude"), code: 1,
			stderrHas: []string{"no HTTP address", filepath.Join(conf, "nope.conf") + " does not exist"}},
		{name: "client-config no token yet", args: with("client-config", "fresh", "--client", "claude"), code: 1,
			stderrHas: []string{"no token yet for soda-validate@fresh"}},
		{name: "client-config no client", args: with("client-config", "shellcheck"), code: 2, stderrHas: []string{"missing --client"}},
		{name: "client-config bad client", args: with("client-config", "shellcheck", "--client", "cursor"), code: 2, stderrHas: []string{`unknown client "cursor"`}},

		// The name a validator's 401 used to give points here.
		{name: "mcp token of a validator", args: []string{"mcp", "token", "--config-dir", conf, "validate-zz-soda-test"}, code: 1,
			stderrHas: []string{"sodactl validate token zz-soda-test"}},
		{name: "mcp client-config of a validator", args: []string{"mcp", "client-config", "--config-dir", conf, "validate-zz-soda-test", "--client", "claude"}, code: 1,
			stderrHas: []string{"sodactl validate client-config zz-soda-test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			if tt.stdout != "" && stdout.String() != tt.stdout {
				t.Errorf("stdout:\n%q\nwant:\n%q", stdout.String(), tt.stdout)
			}
			if tt.code != 0 && stdout.Len() != 0 {
				t.Errorf("failed command wrote to stdout: %q", stdout.String())
			}
			for _, s := range tt.stdoutHas {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout does not contain %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not contain %q:\n%s", s, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), tok) || strings.Contains(stderr.String(), other) {
				t.Errorf("a token leaked to stderr: %s", stderr.String())
			}
		})
	}
}
