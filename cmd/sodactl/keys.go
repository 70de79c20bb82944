package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/hostkeys"
	"github.com/soda-project/soda/internal/llmgateway"
	"github.com/soda-project/soda/internal/sandbox"
)

// loadKeys reads the flags that keep credentials on the host (--llm,
// --llm-key, --llm-budget, --secret, --allow-http, --upstream-ca) into
// hostkeys' configuration (nil without any). A key or secret is taken
// from sodactl's environment or a file, never from the command line; an
// --env that would put one in the sandbox is refused.
func loadKeys(ro *runOptions, lookup func(string) (string, bool)) (*hostkeys.Config, error) {
	c := &hostkeys.Config{}
	var err error
	if c.RootCAs, err = upstreamRoots(ro); err != nil {
		return nil, err
	}
	if c.LLM, c.Budget, err = loadLLM(ro, lookup); err != nil {
		return nil, err
	}
	for _, s := range ro.secret {
		sec, err := parseSecret(s, lookup)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(c.Secrets, func(o egress.Secret) bool { return o.Name == sec.Name }) {
			return nil, usagef("sodactl run", "--secret %s: given twice", sec.Name)
		}
		c.Secrets = append(c.Secrets, sec)
	}
	for _, s := range ro.allowHTTP {
		r, err := egress.ParseHTTPRule(s)
		if err != nil {
			return nil, usagef("sodactl run", "--allow-http: %v", err)
		}
		c.Rules = append(c.Rules, r)
	}
	if c.Empty() {
		return nil, nil
	}
	if ro.noNetwork {
		return nil, usagef("sodactl run", "--no-network excludes --llm, --secret and --allow-http")
	}
	if err := c.CheckEnv(ro.env, lookup); err != nil {
		return nil, usagef("sodactl run", "--env %v; drop it", err)
	}
	return c, nil
}

// loadLLM reads --llm, --llm-key and --llm-budget. A key is taken from
// --llm-key PROVIDER=FILE, else from the provider's usual variable in
// sodactl's environment.
func loadLLM(ro *runOptions, lookup func(string) (string, bool)) ([]llmgateway.Route, int64, error) {
	if len(ro.llm) == 0 {
		for _, o := range []struct {
			name string
			set  bool
		}{{"--llm-key", len(ro.llmKey) > 0}, {"--llm-budget", ro.llmBudget != ""}} {
			if o.set {
				return nil, 0, usagef("sodactl run", "%s goes with --llm PROVIDER", o.name)
			}
		}
		return nil, 0, nil
	}
	keyFiles := map[string]string{}
	for _, kv := range ro.llmKey {
		name, file, ok := strings.Cut(kv, "=")
		if !ok || file == "" {
			return nil, 0, usagef("sodactl run", "--llm-key %s: want PROVIDER=FILE", kv)
		}
		keyFiles[name] = file
	}
	var routes []llmgateway.Route
	for _, spec := range ro.llm {
		name, upstream, _ := strings.Cut(spec, "=")
		p, err := llmgateway.Lookup(name)
		if err != nil {
			return nil, 0, usagef("sodactl run", "--llm %s: %v", spec, err)
		}
		if slices.ContainsFunc(routes, func(r llmgateway.Route) bool { return r.Provider.Name == name }) {
			return nil, 0, usagef("sodactl run", "--llm %s: given twice", name)
		}
		r := llmgateway.Route{Provider: p}
		if upstream != "" {
			if r.Upstream, err = llmgateway.ParseUpstream(upstream); err != nil {
				return nil, 0, usagef("sodactl run", "--llm %s: %v", spec, err)
			}
		}
		if file := keyFiles[name]; file != "" {
			if r.Key, err = hostkeys.ReadCredential(file, false); err != nil {
				return nil, 0, fmt.Errorf("--llm-key %s: %w", name, err)
			}
		} else if v, _ := lookup(p.KeyEnv); strings.TrimSpace(v) != "" {
			r.Key = strings.TrimSpace(v)
			if strings.ContainsAny(r.Key, "\r\n\x00") {
				return nil, 0, fmt.Errorf("--llm %s: $%s holds a line break or NUL", name, p.KeyEnv)
			}
		} else {
			return nil, 0, fmt.Errorf("--llm %s: no key: set %s in sodactl's environment or give --llm-key %s=FILE (a systemd credential's path will do); the sandbox gets a placeholder, never the key", name, p.KeyEnv, name)
		}
		delete(keyFiles, name)
		routes = append(routes, r)
	}
	for name := range keyFiles {
		return nil, 0, usagef("sodactl run", "--llm-key %s: no --llm %s", name, name)
	}
	var budget int64
	if ro.llmBudget != "" {
		n, err := strconv.ParseInt(ro.llmBudget, 10, 64)
		if err != nil || n <= 0 {
			return nil, 0, usagef("sodactl run", "--llm-budget %s: want a positive number of tokens", ro.llmBudget)
		}
		budget = n
	}
	return routes, budget, nil
}

// upstreamRoots is the CAs upstreams are checked against: the system's
// and --upstream-ca's (nil: the system's alone).
func upstreamRoots(ro *runOptions) (*x509.CertPool, error) {
	if len(ro.upstreamCA) == 0 {
		return nil, nil
	}
	if len(ro.llm)+len(ro.secret)+len(ro.allowHTTP) == 0 {
		return nil, usagef("sodactl run", "--upstream-ca goes with --llm, --secret or --allow-http")
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, f := range ro.upstreamCA {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}

// parseSecret reads NAME@HOST:PORT[,HOST:PORT...] (the value of $NAME in
// sodactl's environment) or NAME=FILE@HOST:PORT[,...] (the value in FILE,
// a systemd credential for example).
func parseSecret(s string, lookup func(string) (string, bool)) (egress.Secret, error) {
	spec, hosts, ok := strings.Cut(s, "@")
	if !ok || hosts == "" {
		return egress.Secret{}, usagef("sodactl run", "--secret %s: want NAME@HOST:PORT[,HOST:PORT...] or NAME=FILE@HOST:PORT[,...]", inert(s))
	}
	name, file, fromFile := strings.Cut(spec, "=")
	sec, err := hostkeys.NewSecret(name, hosts)
	if err != nil {
		return egress.Secret{}, usagef("sodactl run", "--secret %v", err)
	}
	if fromFile {
		if sec.Value, err = hostkeys.ReadCredential(file, false); err != nil {
			return egress.Secret{}, fmt.Errorf("--secret %s: %w", name, err)
		}
		return sec, nil
	}
	v, _ := lookup(name)
	switch sec.Value = strings.TrimSpace(v); {
	case sec.Value == "":
		return egress.Secret{}, fmt.Errorf("--secret %s: no value: set %s in sodactl's environment or give %s=FILE@...; a value is never taken from the command line", name, name, name)
	case strings.ContainsAny(sec.Value, "\r\n\x00"):
		return egress.Secret{}, fmt.Errorf("--secret %s: the value holds a line break or NUL", name)
	}
	return sec, nil
}

// inert bounds s for a message, quoted where it has to be.
func inert(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}

// keysFor starts c for one sandbox and applies it to spec (nil c: nothing).
func keysFor(c *hostkeys.Config, spec *sandbox.Spec, log *slog.Logger) (*hostkeys.Keys, error) {
	if c == nil {
		return nil, nil
	}
	k, err := hostkeys.Start(*c, log)
	if err != nil {
		return nil, err
	}
	if err := k.Apply(spec); err != nil {
		k.Close()
		var ng *hostkeys.NotGrantedError
		if errors.As(err, &ng) {
			return nil, usagef("sodactl run", "%s has a --secret or --allow-http but is not granted: add --allow %s (a secret or rule does not grant its host)", ng.Target, ng.Target)
		}
		return nil, err
	}
	return k, nil
}
