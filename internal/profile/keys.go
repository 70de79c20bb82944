package profile

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/llmgateway"
)

// Keys is a profile's [Keys]: credentials that its sandboxes use but never
// hold. sodad reads each credential (a file of root's, LoadCredential=)
// when it creates a sandbox and keeps it on the host (internal/hostkeys):
//
//	[Keys]
//	LoadCredential=ANTHROPIC_API_KEY:/etc/soda/credentials/anthropic
//	LoadCredential=GH_TOKEN:/etc/soda/credentials/github
//	LLM=anthropic
//	Secret=GH_TOKEN@api.github.com:443
//	AllowHTTP=GET,HEAD api.github.com:443/repos/
//	UpstreamCA=/etc/soda/credentials/company-ca.pem
//	LLMBudget=2000000
//
// A model provider's key is the credential named as the provider's
// variable (ANTHROPIC_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY); a
// secret's value is the credential of its name. A secret's or rule's host
// must be one the profile grants (Allow=, AllowPrivate=): neither grants it.
type Keys struct {
	// Credentials are LoadCredential='s ID:PATH pairs, in order.
	Credentials []Credential
	// LLM are the model providers ("anthropic", "openai=URL").
	LLM []string
	// Secrets are NAME@HOST:PORT[,HOST:PORT...].
	Secrets []string
	// Rules are the HTTP rules of terminated hosts.
	Rules []egress.HTTPRule
	// UpstreamCA are PEM files of CAs upstreams are checked against too.
	UpstreamCA []string
	// LLMBudget, if positive, is a sandbox's model token budget.
	LLMBudget int64
}

// Credential is one LoadCredential=ID:PATH.
type Credential struct {
	ID, Path string
}

// Empty reports whether k gives sandboxes nothing.
func (k *Keys) Empty() bool { return len(k.LLM)+len(k.Secrets)+len(k.Rules) == 0 }

// CredentialPath returns the path of the credential id.
func (k *Keys) CredentialPath(id string) (string, bool) {
	i := slices.IndexFunc(k.Credentials, func(c Credential) bool { return c.ID == id })
	if i < 0 {
		return "", false
	}
	return k.Credentials[i].Path, true
}

// applyKeys reads one key of [Keys].
func (p *Profile) applyKeys(name, v string) error {
	k := &p.Keys
	switch name {
	case "LoadCredential":
		id, path, ok := strings.Cut(v, ":")
		if !ok || id == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return errors.New("want ID:PATH, PATH absolute and clean (systemd's LoadCredential=)")
		}
		if _, dup := k.CredentialPath(id); dup {
			return fmt.Errorf("credential %s loaded twice", id)
		}
		k.Credentials = append(k.Credentials, Credential{ID: id, Path: path})
	case "LLM":
		if v == "" {
			k.LLM = nil
			return nil
		}
		for _, w := range words(v) {
			prov, up, _ := strings.Cut(w, "=")
			if _, err := llmgateway.Lookup(prov); err != nil {
				return err
			}
			if up != "" {
				if _, err := llmgateway.ParseUpstream(up); err != nil {
					return err
				}
			}
			k.LLM = append(k.LLM, w)
		}
	case "Secret":
		if v == "" {
			k.Secrets = nil
			return nil
		}
		nm, hosts, ok := strings.Cut(v, "@")
		if !ok || nm == "" || hosts == "" {
			return errors.New("want NAME@HOST:PORT[,HOST:PORT...]")
		}
		for _, h := range strings.Split(hosts, ",") {
			if _, err := egress.ParseExactTarget(strings.TrimSpace(h)); err != nil {
				return err
			}
		}
		k.Secrets = append(k.Secrets, v)
	case "AllowHTTP":
		if v == "" {
			k.Rules = nil
			return nil
		}
		r, err := egress.ParseHTTPRule(v)
		if err != nil {
			return err
		}
		k.Rules = append(k.Rules, r)
	case "UpstreamCA":
		return addList(&k.UpstreamCA, v, checkProfilePath)
	case "LLMBudget":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%.32q is not a positive number of tokens", v)
		}
		k.LLMBudget = n
	default:
		return errors.New("unknown key (known: LoadCredential, LLM, Secret, AllowHTTP, UpstreamCA, LLMBudget)")
	}
	return nil
}

// checkKeys checks [Keys] as a whole, once the file is read: every key and
// secret has its credential, every terminated host is granted.
func (p *Profile) checkKeys() error {
	k := &p.Keys
	if k.Empty() {
		return nil
	}
	if p.NoNetwork {
		return errors.New("NoNetwork=yes excludes LLM=, Secret= and AllowHTTP=")
	}
	for _, l := range k.LLM {
		prov, _, _ := strings.Cut(l, "=")
		pr, _ := llmgateway.Lookup(prov)
		if _, ok := k.CredentialPath(pr.KeyEnv); !ok {
			return fmt.Errorf("LLM=%s needs its key: LoadCredential=%s:PATH", prov, pr.KeyEnv)
		}
	}
	pol := egress.Policy{Allow: p.Allow}
	for _, s := range k.Secrets {
		nm, hosts, _ := strings.Cut(s, "@")
		if _, ok := k.CredentialPath(nm); !ok {
			return fmt.Errorf("Secret=%s needs its value: LoadCredential=%s:PATH", nm, nm)
		}
		for _, h := range strings.Split(hosts, ",") {
			t, _ := egress.ParseExactTarget(strings.TrimSpace(h))
			if !pol.Covers(t) {
				return fmt.Errorf("Secret=%s: %s is not granted (Allow=, AllowPrivate=): a secret does not grant its host", nm, t)
			}
		}
	}
	for _, r := range k.Rules {
		if !pol.Covers(r.HostPort) {
			return fmt.Errorf("AllowHTTP=%s: %s is not granted (Allow=, AllowPrivate=): a rule does not grant its host", r, r.HostPort)
		}
	}
	return nil
}
