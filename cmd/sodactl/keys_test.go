package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostkeys"
	"github.com/soda-project/soda/internal/sandbox"
)

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, hostkeys.MaxCredentialBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-env", "OPENAI_API_KEY": "sk-oai-env", "GH_TOKEN": "ghp_real", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := envs[k]; return v, ok }
	for _, tc := range []struct {
		name    string
		ro      runOptions
		err     string
		keys    []string // the routes' keys, in order
		secrets string   // the secrets' names and hosts
	}{
		{name: "none"},
		{name: "anthropic from its variable", ro: runOptions{llm: repeatFlag{"anthropic"}}, keys: []string{"sk-ant-env"}},
		{name: "two providers, one from a file", ro: runOptions{llm: repeatFlag{"anthropic", "openai=https://gw.example.com/v1"}, llmKey: repeatFlag{"openai=" + keyFile}},
			keys: []string{"sk-ant-env", "sk-from-file"}},
		{name: "unknown provider", ro: runOptions{llm: repeatFlag{"vertex"}}, err: `unknown model provider "vertex"`},
		{name: "twice", ro: runOptions{llm: repeatFlag{"anthropic", "anthropic"}}, err: "given twice"},
		{name: "no key", ro: runOptions{llm: repeatFlag{"openrouter"}}, err: "no key: set OPENROUTER_API_KEY"},
		{name: "plain http elsewhere", ro: runOptions{llm: repeatFlag{"anthropic=http://10.1.2.3"}}, err: "plain http only to the loopback"},
		{name: "key file for no provider", ro: runOptions{llm: repeatFlag{"anthropic"}, llmKey: repeatFlag{"openai=" + keyFile}}, err: "--llm-key openai: no --llm openai"},
		{name: "key file too big", ro: runOptions{llm: repeatFlag{"anthropic"}, llmKey: repeatFlag{"anthropic=" + big}}, err: "not a credential"},
		{name: "key file missing", ro: runOptions{llm: repeatFlag{"anthropic"}, llmKey: repeatFlag{"anthropic=" + dir + "/nope"}}, err: "no such file"},
		{name: "--env of the key variable", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"ANTHROPIC_API_KEY"}}, err: "--env ANTHROPIC_API_KEY: the sandbox gets it from the model gateway"},
		{name: "--env of Codex's key variable", ro: runOptions{llm: repeatFlag{"openai"}, env: repeatFlag{"CODEX_API_KEY=x"}}, err: "--env CODEX_API_KEY"},
		{name: "--env of the base URL", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"ANTHROPIC_BASE_URL=x"}}, err: "--env ANTHROPIC_BASE_URL"},
		{name: "--env holding the key", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"X=Bearer sk-ant-env"}}, err: "holds the anthropic key"},
		{name: "budget", ro: runOptions{llm: repeatFlag{"anthropic"}, llmBudget: "1000"}, keys: []string{"sk-ant-env"}},
		{name: "bad budget", ro: runOptions{llm: repeatFlag{"anthropic"}, llmBudget: "-1"}, err: "positive number"},
		{name: "budget without --llm", ro: runOptions{llmBudget: "5"}, err: "--llm-budget goes with --llm"},
		{name: "no network", ro: runOptions{llm: repeatFlag{"anthropic"}, noNetwork: true}, err: "--no-network excludes --llm"},
		{name: "CA file without a certificate", ro: runOptions{llm: repeatFlag{"anthropic"}, upstreamCA: repeatFlag{keyFile}}, err: "no PEM certificate"},
		{name: "CA alone", ro: runOptions{upstreamCA: repeatFlag{keyFile}}, err: "--upstream-ca goes with"},
		{name: "secret from the environment", ro: runOptions{secret: repeatFlag{"GH_TOKEN@API.github.com:443"}}, secrets: "GH_TOKEN api.github.com:443"},
		{name: "secret from a file, two hosts", ro: runOptions{secret: repeatFlag{"TOK=" + keyFile + "@a.example.com:443,b.example.com:8443"}},
			secrets: "TOK a.example.com:443,b.example.com:8443"},
		{name: "secret without hosts", ro: runOptions{secret: repeatFlag{"GH_TOKEN"}}, err: "want NAME@HOST:PORT"},
		{name: "secret for a domain", ro: runOptions{secret: repeatFlag{"GH_TOKEN@*.github.com:443"}}, err: "one host"},
		{name: "secret without a value", ro: runOptions{secret: repeatFlag{"EMPTY@a.example.com:443"}}, err: "no value: set EMPTY"},
		{name: "a value on the command line is not a file", ro: runOptions{secret: repeatFlag{"GH_TOKEN=ghp_x@a.example.com:443"}}, err: "no such file"},
		{name: "a bad name", ro: runOptions{secret: repeatFlag{"9X@a.example.com:443"}}, err: "not a variable name"},
		{name: "a name the sandbox may not have", ro: runOptions{secret: repeatFlag{"LD_PRELOAD@a.example.com:443"}}, err: "may not have"},
		{name: "secret twice", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443", "GH_TOKEN@a.example.com:443"}}, err: "given twice"},
		{name: "--env of the secret", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"GH_TOKEN"}}, err: "--env GH_TOKEN"},
		{name: "--env holding the secret", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"X=token ghp_real"}}, err: "holds the secret GH_TOKEN"},
		{name: "--env of a CA variable", ro: runOptions{secret: repeatFlag{"GH_TOKEN@a.example.com:443"}, env: repeatFlag{"SSL_CERT_FILE=/x"}}, err: "CA bundle"},
		{name: "bad rule", ro: runOptions{allowHTTP: repeatFlag{"get a.example.com:443/"}}, err: "upper-case"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadKeys(&tc.ro, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				for _, k := range envs {
					if k != "" && strings.Contains(err.Error(), k) {
						t.Fatalf("the error shows a value: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.keys == nil && tc.secrets == "" {
				if c != nil {
					t.Fatalf("config %+v without flags", c)
				}
				return
			}
			var keys []string
			for _, r := range c.LLM {
				keys = append(keys, r.Key)
			}
			if strings.Join(keys, ",") != strings.Join(tc.keys, ",") {
				t.Fatalf("keys %v, want %v", keys, tc.keys)
			}
			var secrets []string
			for _, s := range c.Secrets {
				secrets = append(secrets, s.Name+" "+strings.Join(s.Hosts, ","))
				if !strings.HasPrefix(s.Placeholder, "soda-placeholder-") || s.Value == "" {
					t.Errorf("secret %s: placeholder %q", s.Name, s.Placeholder)
				}
			}
			if strings.Join(secrets, ";") != tc.secrets {
				t.Fatalf("secrets %v, want %s", secrets, tc.secrets)
			}
		})
	}
}

// TestKeysFor: a secret's host must be granted; applied, the sandbox
// gets the placeholder, the CA in its bundle and the terminator.
func TestKeysFor(t *testing.T) {
	lookup := func(k string) (string, bool) { return "ghp_real", k == "GH_TOKEN" }
	c, err := loadKeys(&runOptions{secret: repeatFlag{"GH_TOKEN@api.github.com:443"}}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	var spec sandbox.Spec
	if _, err := keysFor(c, &spec, nil); err == nil || !strings.Contains(err.Error(), "add --allow api.github.com:443") {
		t.Fatalf("an ungranted host: %v", err)
	}
	g, _ := egress.ParseGrant("*.github.com:443", false)
	spec.Egress.Allow = []egress.Grant{g}
	k, err := keysFor(c, &spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	env := strings.Join(spec.TrustedEnv, " ")
	if !strings.Contains(env, "GH_TOKEN=soda-placeholder-gh_token-") || !strings.Contains(env, "SSL_CERT_FILE=/") || strings.Contains(env, "ghp_real") {
		t.Errorf("TrustedEnv %s", env)
	}
	if len(spec.Masks) != 1 || !strings.Contains(string(spec.Masks[0].Data), "BEGIN CERTIFICATE") || spec.Terminate == nil {
		t.Errorf("masks %d, terminate %v", len(spec.Masks), spec.Terminate != nil)
	}
	if d := strings.Join(k.Describe(), ";"); d != "secret GH_TOKEN api.github.com:443" {
		t.Errorf("Describe %q", d)
	}
}
