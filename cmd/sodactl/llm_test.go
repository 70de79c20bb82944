package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadLLM(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxKeyBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-env", "OPENAI_API_KEY": "sk-oai-env"}
	lookup := func(k string) (string, bool) { v, ok := envs[k]; return v, ok }
	for _, tc := range []struct {
		name string
		ro   runOptions
		err  string
		keys []string // the routes' keys, in order
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
		{name: "key file too big", ro: runOptions{llm: repeatFlag{"anthropic"}, llmKey: repeatFlag{"anthropic=" + big}}, err: "not a key"},
		{name: "key file missing", ro: runOptions{llm: repeatFlag{"anthropic"}, llmKey: repeatFlag{"anthropic=" + dir + "/nope"}}, err: "no such file"},
		{name: "--env of the key variable", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"ANTHROPIC_API_KEY"}}, err: "drop --env ANTHROPIC_API_KEY"},
		{name: "--env of Codex's key variable", ro: runOptions{llm: repeatFlag{"openai"}, env: repeatFlag{"CODEX_API_KEY=x"}}, err: "drop --env CODEX_API_KEY"},
		{name: "--env of the base URL", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"ANTHROPIC_BASE_URL=x"}}, err: "drop --env ANTHROPIC_BASE_URL"},
		{name: "--env holding the key", ro: runOptions{llm: repeatFlag{"anthropic"}, env: repeatFlag{"X=Bearer sk-ant-env"}}, err: "holds the --llm anthropic key"},
		{name: "budget", ro: runOptions{llm: repeatFlag{"anthropic"}, llmBudget: "1000"}, keys: []string{"sk-ant-env"}},
		{name: "bad budget", ro: runOptions{llm: repeatFlag{"anthropic"}, llmBudget: "-1"}, err: "positive number"},
		{name: "budget without --llm", ro: runOptions{llmBudget: "5"}, err: "--llm-budget goes with --llm"},
		{name: "no network", ro: runOptions{llm: repeatFlag{"anthropic"}, noNetwork: true}, err: "--no-network excludes --llm"},
		{name: "CA file without a certificate", ro: runOptions{llm: repeatFlag{"anthropic"}, upstreamCA: repeatFlag{keyFile}}, err: "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc, err := loadLLM(&tc.ro, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				for _, k := range envs {
					if strings.Contains(err.Error(), k) {
						t.Fatalf("the error shows a key: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.keys == nil {
				if lc != nil {
					t.Fatalf("config %+v without --llm", lc)
				}
				return
			}
			var keys []string
			for _, r := range lc.routes {
				keys = append(keys, r.Key)
			}
			if strings.Join(keys, ",") != strings.Join(tc.keys, ",") {
				t.Fatalf("keys %v, want %v", keys, tc.keys)
			}
		})
	}
}
