package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// Secret is a credential the sandbox holds only as a placeholder: the
// proxy puts Value in its place in the request headers sent to Hosts,
// which it terminates for that purpose.
type Secret struct {
	// Name is the variable that holds the placeholder in the sandbox.
	Name string
	// Value is the real credential; it never leaves the host but to Hosts.
	Value string
	// Placeholder is what the sandbox sees (NewPlaceholder).
	Placeholder string
	// Hosts are the exact host:port targets the secret is for.
	Hosts []string
}

// HTTPRule lets requests with one of Methods (all if empty) to HostPort
// whose path starts with PathPrefix through a terminated host. A host with
// rules refuses every request no rule allows.
type HTTPRule struct {
	Methods    []string
	HostPort   string
	PathPrefix string
}

// String is the rule as --allow-http takes it.
func (r HTTPRule) String() string {
	m := "*"
	if len(r.Methods) > 0 {
		m = strings.Join(r.Methods, ",")
	}
	return m + " " + r.HostPort + r.PathPrefix
}

// ParseHTTPRule reads "METHOD[,METHOD...] HOST:PORT/PATH-PREFIX" (METHOD
// * for any).
func ParseHTTPRule(s string) (HTTPRule, error) {
	methods, rest, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return HTTPRule{}, fmt.Errorf("rule %q: want 'METHOD[,METHOD...] HOST:PORT/PATH-PREFIX'", s)
	}
	var r HTTPRule
	if methods != "*" {
		for _, m := range strings.Split(methods, ",") {
			if m == "" || strings.ToUpper(m) != m || strings.ContainsFunc(m, func(c rune) bool { return c < 'A' || c > 'Z' }) {
				return HTTPRule{}, fmt.Errorf("rule %q: method %q: want upper-case letters, or * for any", s, m)
			}
			r.Methods = append(r.Methods, m)
		}
	}
	rest = strings.TrimSpace(rest)
	hp, path, _ := strings.Cut(rest, "/")
	host, err := ParseExactTarget(hp)
	if err != nil {
		return HTTPRule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	r.HostPort, r.PathPrefix = host, "/"+path
	if strings.ContainsAny(r.PathPrefix, "?# \t") {
		return HTTPRule{}, fmt.Errorf("rule %q: the path prefix holds no query, fragment or space", s)
	}
	return r, nil
}

// ParseExactTarget normalises an exact host:port (no *.domain): a target
// soda terminates TLS for.
func ParseExactTarget(s string) (string, error) {
	g, err := ParseGrant(s, false)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(g.Host, ".") {
		return "", fmt.Errorf("%q: a secret or HTTP rule names one host, not a domain's", s)
	}
	return g.String(), nil
}

// NewPlaceholder returns a new random placeholder for the secret called
// name: it names it, so that a log that shows it says what it stands for,
// and holds 128 random bits.
func NewPlaceholder(name string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails
	return "soda-placeholder-" + strings.ToLower(name) + "-" + hex.EncodeToString(b)
}

// Terminator is what the proxy needs to terminate TLS: a certificate
// authority made for one sandbox (its key never leaves the host's
// memory), the secrets and rules, and the CAs upstreams are checked
// against. Build it with NewTerminator.
type Terminator struct {
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPEM   []byte
	secrets []Secret
	rules   []HTTPRule
	hosts   map[string]bool // host:port terminated
	// RootCAs check upstreams (nil: the host's).
	RootCAs *x509.CertPool

	mu    sync.Mutex
	certs map[string]*tls.Certificate // by host
}

// maxCerts bounds the leaf certificates a terminator keeps.
const maxCerts = 256

// NewTerminator makes a new CA and a Terminator for secrets and rules.
func NewTerminator(secrets []Secret, rules []HTTPRule, roots *x509.CertPool) (*Terminator, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA key: %w", err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "soda sandbox CA " + serial.Text(16)[:12], Organization: []string{"soda"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(der)
	t := &Terminator{ca: ca, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		secrets: slices.Clone(secrets), rules: slices.Clone(rules), hosts: map[string]bool{}, RootCAs: roots,
		certs: map[string]*tls.Certificate{}}
	for _, s := range secrets {
		if s.Placeholder == "" || s.Value == "" || strings.Contains(s.Value, s.Placeholder) {
			return nil, fmt.Errorf("secret %s: no value or placeholder", s.Name)
		}
		for _, h := range s.Hosts {
			t.hosts[h] = true
		}
	}
	for _, r := range rules {
		t.hosts[r.HostPort] = true
	}
	return t, nil
}

// CACert is the sandbox CA's certificate, PEM: what the sandbox trusts.
func (t *Terminator) CACert() []byte { return t.caPEM }

// Terminates reports whether the proxy terminates TLS for target
// (host:port): one with a secret or a rule.
func (t *Terminator) Terminates(target string) bool { return t != nil && t.hosts[target] }

// Hosts lists the terminated targets, sorted.
func (t *Terminator) Hosts() []string {
	var out []string
	for h := range t.hosts {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// certFor returns a leaf certificate for host, signed by the CA.
func (t *Terminator) certFor(host string) (*tls.Certificate, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.certs[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: t.ca.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, t.ca, &key.PublicKey, t.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	if len(t.certs) >= maxCerts {
		clear(t.certs)
	}
	t.certs[host] = c
	return c, nil
}

// errForeignPlaceholder is a placeholder sent where its secret is not for.
var errForeignPlaceholder = errors.New("placeholder of another host's secret")

// replace puts the real value of each of target's secrets in place of its
// placeholder in s. A placeholder of a secret that is not for target is
// an error naming the secret (an exfiltration attempt).
func (t *Terminator) replace(target, s string) (string, error) {
	if !strings.Contains(s, "soda-placeholder-") {
		return s, nil
	}
	for _, sec := range t.secrets {
		if !strings.Contains(s, sec.Placeholder) {
			continue
		}
		if !slices.Contains(sec.Hosts, target) {
			return "", fmt.Errorf("%w: %s (for %s) sent to %s", errForeignPlaceholder, sec.Name, strings.Join(sec.Hosts, ","), target)
		}
		s = strings.ReplaceAll(s, sec.Placeholder, sec.Value)
	}
	return s, nil
}

// allowed reports whether target's rules let method and p (the request's
// path, decoded, and its escaped form) through: a target without rules lets
// everything through; with rules, a path that is not in canonical form
// (dot segments, doubled or encoded slashes or dots) is refused, as the
// upstream might read it as another path than the rule's.
func (t *Terminator) allowed(target, method, p, escaped string) bool {
	if !slices.ContainsFunc(t.rules, func(r HTTPRule) bool { return r.HostPort == target }) {
		return true
	}
	if !canonicalPath(p, escaped) {
		return false
	}
	any := false
	for _, r := range t.rules {
		if r.HostPort != target {
			continue
		}
		any = true
		if (len(r.Methods) == 0 || slices.Contains(r.Methods, method)) && pathHasPrefix(p, r.PathPrefix) {
			return true
		}
	}
	return !any
}

// pathHasPrefix matches a path against a rule's prefix: "/repos/x" covers
// "/repos/x" and "/repos/x/..." but not "/repos/xy" unless the prefix ends
// in "/" or is "/".
func pathHasPrefix(path, prefix string) bool {
	if prefix == "/" || path == prefix {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return strings.HasPrefix(path, prefix+"/")
}

// canonicalPath reports whether p (escaped, as sent) is a path a rule can
// be matched against: absolute, no dot segments, no doubled slashes, no
// backslash, no encoded slash, dot or backslash.
func canonicalPath(p, escaped string) bool {
	if p == "" || p[0] != '/' || strings.Contains(p, "//") || strings.Contains(p, "\\") {
		return false
	}
	if c := path.Clean(p); p != c && p != c+"/" {
		return false
	}
	low := strings.ToLower(escaped)
	return !strings.Contains(low, "%2f") && !strings.Contains(low, "%2e") && !strings.Contains(low, "%5c")
}
