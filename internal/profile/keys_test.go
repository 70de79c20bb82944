package profile

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	base := "[Profile]\nUsers=alice\n[Grants]\nAllow=api.github.com:443 *.example.com:443\n"
	for _, tc := range []struct {
		name, keys, err string
		check           func(t *testing.T, k Keys)
	}{
		{name: "none", check: func(t *testing.T, k Keys) {
			if !k.Empty() {
				t.Error("not empty")
			}
		}},
		{name: "all of it", keys: "LoadCredential=ANTHROPIC_API_KEY:/etc/soda/credentials/anthropic\nLoadCredential=GH_TOKEN:/etc/soda/credentials/gh\n" +
			"LLM=anthropic openai=https://gw.example.com/v1\nLoadCredential=OPENAI_API_KEY:/etc/soda/credentials/openai\n" +
			"Secret=GH_TOKEN@api.github.com:443,a.example.com:443\nAllowHTTP=GET,HEAD api.github.com:443/repos/\nUpstreamCA=/etc/soda/ca.pem\nLLMBudget=1000\n",
			check: func(t *testing.T, k Keys) {
				if len(k.LLM) != 2 || len(k.Secrets) != 1 || len(k.Rules) != 1 || k.LLMBudget != 1000 || len(k.UpstreamCA) != 1 {
					t.Errorf("%+v", k)
				}
				if p, ok := k.CredentialPath("GH_TOKEN"); !ok || p != "/etc/soda/credentials/gh" {
					t.Errorf("GH_TOKEN at %q", p)
				}
			}},
		{name: "a provider without its key", keys: "LLM=anthropic\n", err: "LoadCredential=ANTHROPIC_API_KEY:PATH"},
		{name: "an unknown provider", keys: "LLM=vertex\n", err: "unknown model provider"},
		{name: "a secret without its value", keys: "Secret=GH_TOKEN@api.github.com:443\n", err: "LoadCredential=GH_TOKEN:PATH"},
		{name: "a secret's host not granted", keys: "LoadCredential=T:/x\nSecret=T@evil.example.org:443\n", err: "is not granted"},
		{name: "a rule's host not granted", keys: "AllowHTTP=GET evil.example.org:443/\n", err: "is not granted"},
		{name: "a relative credential", keys: "LoadCredential=T:x\n", err: "absolute"},
		{name: "a credential twice", keys: "LoadCredential=T:/x\nLoadCredential=T:/y\n", err: "loaded twice"},
		{name: "a budget twice", keys: "LLMBudget=1\nLLMBudget=2\n", err: "set twice"},
		{name: "a bad budget", keys: "LLMBudget=-4\n", err: "positive number"},
		{name: "a domain secret", keys: "LoadCredential=T:/x\nSecret=T@*.example.com:443\n", err: "one host"},
		{name: "an unknown key", keys: "Password=x\n", err: "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := base
			if tc.keys != "" {
				text += "[Keys]\n" + tc.keys
			}
			p, err := Parse("/etc/soda/sandbox/k.conf", "k", []byte(text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p.Keys)
		})
	}
	if _, err := Parse("f", "k", []byte("[Grants]\nNoNetwork=yes\n[Keys]\nAllowHTTP=GET a.example.com:443/\n")); err == nil {
		t.Error("NoNetwork with keys parsed")
	}
}

func TestImage(t *testing.T) {
	d := strings.Repeat("ab", 32)
	for _, tc := range []struct{ v, err string }{
		{v: "registry.example.com/tools@sha256:" + d},
		{v: "registry.example.com/tools:1", err: "by digest"},
		{v: "registry.example.com/tools@sha256:" + d[:10], err: "by digest"},
		{v: "@sha256:" + d, err: "by digest"},
	} {
		p, err := Parse("f", "k", []byte("[Profile]\nUsers=alice\nImage="+tc.v+"\n"))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Image=%s: %v, want %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || p.Image != tc.v {
			t.Errorf("Image=%s: %v %q", tc.v, err, p.Image)
		}
	}
}
