package main

import (
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// caBundles are where distributions keep the system's CA bundle, the
// first one that exists being the one the sandbox sees with its CA added.
var caBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Arch, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
}

// caEnv are the variables that point TLS clients at a CA bundle.
var caEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

// terminated is what --secret and --allow-http make: the proxy's
// terminator and what the sandbox gets (placeholders, the CA trusted).
type terminated struct {
	term *egress.Terminator
	env  []string // NAME=placeholder
}

// loadTerminated reads --secret and --allow-http (nil without either).
// Each target must be granted by --allow or --allow-private: a secret or
// a rule does not grant its host.
func loadTerminated(ro *runOptions, spec *sandbox.Spec, roots *x509.CertPool, lookup func(string) (string, bool)) (*terminated, error) {
	if len(ro.secret)+len(ro.allowHTTP) == 0 {
		return nil, nil
	}
	var secrets []egress.Secret
	var rules []egress.HTTPRule
	for _, s := range ro.secret {
		sec, err := parseSecret(s, lookup)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(secrets, func(o egress.Secret) bool { return o.Name == sec.Name }) {
			return nil, usagef("sodactl run", "--secret %s: given twice", sec.Name)
		}
		secrets = append(secrets, sec)
	}
	for _, s := range ro.allowHTTP {
		r, err := egress.ParseHTTPRule(s)
		if err != nil {
			return nil, usagef("sodactl run", "--allow-http: %v", err)
		}
		rules = append(rules, r)
	}
	term, err := egress.NewTerminator(secrets, rules, roots)
	if err != nil {
		return nil, err
	}
	for _, h := range term.Hosts() {
		if !spec.Egress.Covers(h) {
			return nil, usagef("sodactl run", "%s has a --secret or --allow-http but is not granted: add --allow %s (a secret or rule does not grant its host)", h, h)
		}
	}
	for _, e := range ro.env {
		k, v, _ := strings.Cut(e, "=")
		if !strings.Contains(e, "=") {
			v, _ = lookup(k)
		}
		for _, s := range secrets {
			if k == s.Name {
				return nil, usagef("sodactl run", "--env %s: the sandbox gets %s's placeholder from --secret; drop --env %s", k, k, k)
			}
			if v != "" && strings.Contains(v, s.Value) {
				return nil, usagef("sodactl run", "--env %s: its value holds the --secret %s value, which must stay on the host", k, s.Name)
			}
		}
		if slices.Contains(caEnv, k) {
			return nil, usagef("sodactl run", "--env %s: with --secret or --allow-http soda sets the sandbox's CA bundle", k)
		}
	}
	t := &terminated{term: term}
	for _, s := range secrets {
		t.env = append(t.env, s.Name+"="+s.Placeholder)
	}
	return t, nil
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
	if !validEnvName(name) {
		return egress.Secret{}, usagef("sodactl run", "--secret %s: %q is not a variable name", inert(s), inert(name))
	}
	kept, _ := sandbox.FilterEnv([]string{name + "=x"})
	if len(kept) == 0 {
		return egress.Secret{}, usagef("sodactl run", "--secret %s: the sandbox may not have a variable called %s", name, name)
	}
	sec := egress.Secret{Name: name, Placeholder: egress.NewPlaceholder(name)}
	for _, h := range strings.Split(hosts, ",") {
		t, err := egress.ParseExactTarget(h)
		if err != nil {
			return egress.Secret{}, usagef("sodactl run", "--secret %s: %v", name, err)
		}
		sec.Hosts = append(sec.Hosts, t)
	}
	if fromFile {
		f, err := os.Open(file)
		if err != nil {
			return egress.Secret{}, fmt.Errorf("--secret %s: %w", name, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxKeyBytes+1))
		if err != nil {
			return egress.Secret{}, fmt.Errorf("--secret %s: read %s: %w", name, file, err)
		}
		if len(b) > maxKeyBytes {
			return egress.Secret{}, fmt.Errorf("--secret %s: %s is over %d bytes", name, file, maxKeyBytes)
		}
		sec.Value = strings.TrimSpace(string(b))
	} else {
		v, _ := lookup(name)
		sec.Value = strings.TrimSpace(v)
	}
	switch {
	case sec.Value == "":
		return egress.Secret{}, fmt.Errorf("--secret %s: no value: set %s in sodactl's environment or give %s=FILE@...; a value is never taken from the command line", name, name, name)
	case strings.ContainsAny(sec.Value, "\r\n\x00"):
		return egress.Secret{}, fmt.Errorf("--secret %s: the value holds a line break or NUL", name)
	}
	return sec, nil
}

// apply gives the sandbox its placeholders and makes it trust the
// sandbox CA: the system bundle it sees has the CA added, and the usual
// variables point at it.
func (t *terminated) apply(spec *sandbox.Spec) error {
	if t == nil {
		return nil
	}
	bundle, data, err := systemBundle()
	if err != nil {
		return err
	}
	data = append(append(data, '\n'), t.term.CACert()...)
	if len(data) > wire.MaxMaskBytes {
		return fmt.Errorf("the system CA bundle %s with the sandbox CA is over %d bytes", bundle, wire.MaxMaskBytes)
	}
	spec.Masks = append(spec.Masks, sandbox.Mask{Path: bundle, Data: data})
	spec.Terminate = t.term
	spec.TrustedEnv = append(spec.TrustedEnv, t.env...)
	for _, k := range caEnv {
		spec.TrustedEnv = append(spec.TrustedEnv, k+"="+bundle)
	}
	return nil
}

// systemBundle reads the first CA bundle of caBundles that exists.
func systemBundle() (string, []byte, error) {
	for _, p := range caBundles {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(r)
		if err != nil {
			return "", nil, fmt.Errorf("read the system CA bundle: %w", err)
		}
		return p, b, nil
	}
	return "", nil, fmt.Errorf("no system CA bundle (%s) to add the sandbox CA to", strings.Join(caBundles, ", "))
}

// validEnvName reports whether s is a portable variable name.
func validEnvName(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
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
