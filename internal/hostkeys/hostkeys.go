// Package hostkeys keeps a sandbox's credentials on the host: it starts,
// for one sandbox, the model gateway (internal/llmgateway) and the egress
// proxy's TLS terminator (egress.Terminator) that a Config asks for, and
// gives the sandbox only what points its clients at them: placeholders,
// base URLs, the gateway's relayed port and the trust of the sandbox CA.
//
// sodactl run (flags, the caller's environment and files) and sodad (a
// profile's [Keys], root's credential files) each build a Config; both
// own what Start returns for the sandbox's lifetime.
package hostkeys

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/llmgateway"
	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// Config is the credentials a sandbox's egress holds for it.
type Config struct {
	// LLM are the model providers served by the gateway, with their keys.
	LLM []llmgateway.Route
	// Budget, if positive, is the tokens after which model requests are
	// refused.
	Budget int64
	// Secrets are put in place of their placeholders by the proxy, for
	// their hosts; Rules restrict method and path on theirs.
	Secrets []egress.Secret
	Rules   []egress.HTTPRule
	// RootCAs check the upstreams (nil: the host's).
	RootCAs *x509.CertPool
	// Metrics, if set, counts the gateway's requests, tokens and
	// upstream errors.
	Metrics llmgateway.Metrics
}

// Empty reports whether c asks for nothing.
func (c *Config) Empty() bool {
	return c == nil || len(c.LLM)+len(c.Secrets)+len(c.Rules) == 0
}

// CheckEnv refuses an environment entry (KEY=VALUE, or KEY whose value
// lookup gives) that would put one of c's values in the sandbox, or set a
// variable that c sets.
func (c *Config) CheckEnv(env []string, lookup func(string) (string, bool)) error {
	if c.Empty() {
		return nil
	}
	for _, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			v, _ = lookup(k)
		}
		for _, r := range c.LLM {
			if k == r.Provider.KeyEnv || k == r.Provider.BaseURLEnv || slices.Contains(r.Provider.MoreKeyEnv, k) {
				return fmt.Errorf("%s: the sandbox gets it from the model gateway for %s (a placeholder key, never the real one)", k, r.Provider.Name)
			}
			if v != "" && strings.Contains(v, r.Key) {
				return fmt.Errorf("%s: its value holds the %s key, which stays on the host", k, r.Provider.Name)
			}
		}
		for _, s := range c.Secrets {
			if k == s.Name {
				return fmt.Errorf("%s: the sandbox gets its placeholder from the secret %s", k, s.Name)
			}
			if v != "" && strings.Contains(v, s.Value) {
				return fmt.Errorf("%s: its value holds the secret %s, which stays on the host", k, s.Name)
			}
		}
		if len(c.Secrets)+len(c.Rules) > 0 && slices.Contains(caEnv, k) {
			return fmt.Errorf("%s: the sandbox's CA bundle is soda's with secrets or HTTP rules", k)
		}
	}
	return nil
}

// Keys is a Config started for one sandbox.
type Keys struct {
	cfg  Config
	gw   *llmgateway.Gateway
	port uint16
	term *egress.Terminator
	sb   atomic.Pointer[sandbox.Sandbox]
}

// Start starts what c asks for: the model gateway on an ephemeral port
// of the host's loopback, the terminator with a new CA. Close stops them.
func Start(c Config, log *slog.Logger) (*Keys, error) {
	k := &Keys{cfg: c}
	if len(c.LLM) > 0 {
		gw, err := llmgateway.New(llmgateway.Config{Routes: c.LLM, RootCAs: c.RootCAs, Budget: c.Budget, Log: log, Metrics: c.Metrics,
			Record: func(ev llmgateway.Event) {
				if sb := k.sb.Load(); sb != nil {
					sb.RecordModel(ev)
				}
			}})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("model gateway: %w", err)
		}
		k.gw, k.port = gw, uint16(ln.Addr().(*net.TCPAddr).Port)
		gw.Start(ln)
	}
	if len(c.Secrets)+len(c.Rules) > 0 {
		t, err := egress.NewTerminator(c.Secrets, c.Rules, c.RootCAs)
		if err != nil {
			k.Close()
			return nil, err
		}
		k.term = t
	}
	return k, nil
}

// Apply points spec's sandbox at k: the gateway's port relayed and its
// variables set, the secrets' placeholders set, the terminator in the
// proxy and its CA trusted (the system bundle the sandbox sees has it,
// and the usual variables name that bundle). Each host of a secret or a
// rule must be granted by spec's egress: neither grants its host.
func (k *Keys) Apply(spec *sandbox.Spec) error {
	if k == nil {
		return nil
	}
	if k.gw != nil {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(k.port)))
		spec.Egress.MCPPorts = append(spec.Egress.MCPPorts, k.port)
		spec.TrustedEnv = append(spec.TrustedEnv, k.gw.Env(addr)...)
		spec.Argv = k.agentArgs(spec.Argv, addr)
	}
	if k.term == nil {
		return nil
	}
	for _, h := range k.term.Hosts() {
		if !spec.Egress.Covers(h) {
			return &NotGrantedError{Target: h}
		}
	}
	bundle, data, err := systemBundle()
	if err != nil {
		return err
	}
	data = append(append(data, '\n'), k.term.CACert()...)
	if len(data) > wire.MaxMaskBytes {
		return fmt.Errorf("the system CA bundle %s with the sandbox CA is over %d bytes", bundle, wire.MaxMaskBytes)
	}
	spec.Masks = append(spec.Masks, sandbox.Mask{Path: bundle, Data: data})
	spec.Terminate = k.term
	for _, s := range k.cfg.Secrets {
		spec.TrustedEnv = append(spec.TrustedEnv, s.Name+"="+s.Placeholder)
	}
	for _, v := range caEnv {
		spec.TrustedEnv = append(spec.TrustedEnv, v+"="+bundle)
	}
	return nil
}

// agentArgs adjusts argv for an agent that does not read its provider's
// base-URL variable: Codex (0.169) takes the OpenAI base URL only from
// its configuration, so "codex ..." gets -c openai_base_url="URL" (a
// global option, before its subcommand).
func (k *Keys) agentArgs(argv []string, addr string) []string {
	if len(argv) == 0 || filepath.Base(argv[0]) != "codex" {
		return argv
	}
	for _, r := range k.cfg.LLM {
		if r.Provider.Name == "openai" {
			url := "http://" + addr + "/openai" + r.Provider.BaseURLSuffix
			return slices.Concat(argv[:1], []string{"-c", `openai_base_url="` + url + `"`}, argv[1:])
		}
	}
	return argv
}

// NotGrantedError is a secret's or rule's host that the sandbox's egress
// does not grant.
type NotGrantedError struct{ Target string }

// Error names the host and what to do.
func (e *NotGrantedError) Error() string {
	return fmt.Sprintf("%s has a secret or HTTP rule but is not granted (a secret or rule does not grant its host): grant it too", e.Target)
}

// Attach sends the gateway's records to sb's audit trail.
func (k *Keys) Attach(sb *sandbox.Sandbox) {
	if k != nil {
		k.sb.Store(sb)
	}
}

// Close stops the gateway (requests in flight are cut).
func (k *Keys) Close() {
	if k != nil && k.gw != nil {
		_ = k.gw.Close()
	}
}

// Usage is the tokens spent through the gateway.
func (k *Keys) Usage() llmgateway.Usage {
	if k == nil || k.gw == nil {
		return llmgateway.Usage{}
	}
	return k.gw.Usage()
}

// Describe lists what k holds for the sandbox, never a value: "llm
// anthropic https://…", "secret GH_TOKEN api.github.com:443", "http GET
// api.github.com:443/repos/".
func (k *Keys) Describe() []string {
	if k == nil {
		return nil
	}
	var out []string
	for _, r := range k.cfg.LLM {
		up := r.Provider.Upstream
		if r.Upstream != nil {
			up = r.Upstream.String()
		}
		out = append(out, "llm "+r.Provider.Name+" "+up)
	}
	for _, s := range k.cfg.Secrets {
		out = append(out, "secret "+s.Name+" "+strings.Join(s.Hosts, ","))
	}
	for _, r := range k.cfg.Rules {
		out = append(out, "http "+r.String())
	}
	return out
}

// caBundles are where distributions keep the system's CA bundle; the
// first that exists is the one the sandbox sees with its CA added.
var caBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Arch, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
}

// caEnv are the variables that point TLS clients at a CA bundle.
var caEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

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

// MaxCredentialBytes bounds a credential file.
const MaxCredentialBytes = 16 << 10

// errNotRootOnly is a credential file others could read.
var errNotRootOnly = errors.New("not a regular file of root's that no one else may read (chown root; chmod 0600)")

// ReadCredential reads a credential from the file at path: at most
// MaxCredentialBytes, the white space around it dropped, no line break
// or NUL inside, not empty. With rootOnly (sodad's credentials) the file
// must be a regular file owned by root that neither its group nor others
// may read, as systemd's LoadCredential= sources are.
func ReadCredential(path string, rootOnly bool) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	if rootOnly {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != 0 || fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s: %w", path, errNotRootOnly)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCredentialBytes+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxCredentialBytes {
		return "", fmt.Errorf("%s: over %d bytes: not a credential", path, MaxCredentialBytes)
	}
	v := strings.TrimSpace(string(b))
	switch {
	case v == "":
		return "", fmt.Errorf("%s: empty", path)
	case strings.ContainsAny(v, "\r\n\x00"):
		return "", fmt.Errorf("%s: a line break or NUL inside the credential", path)
	}
	return v, nil
}

// NewSecret is the secret called name for hosts (HOST:PORT[,HOST:PORT...],
// each one exact host), with a new placeholder and no value yet.
func NewSecret(name, hosts string) (egress.Secret, error) {
	if !validEnvName(name) {
		return egress.Secret{}, fmt.Errorf("%q is not a variable name", name)
	}
	if kept, _ := sandbox.FilterEnv([]string{name + "=x"}); len(kept) == 0 {
		return egress.Secret{}, fmt.Errorf("%s: the sandbox may not have a variable called %s", name, name)
	}
	sec := egress.Secret{Name: name, Placeholder: egress.NewPlaceholder(name)}
	for _, h := range strings.Split(hosts, ",") {
		t, err := egress.ParseExactTarget(strings.TrimSpace(h))
		if err != nil {
			return egress.Secret{}, fmt.Errorf("%s: %w", name, err)
		}
		if !slices.Contains(sec.Hosts, t) {
			sec.Hosts = append(sec.Hosts, t)
		}
	}
	return sec, nil
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
