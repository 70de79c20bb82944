package main

import (
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/soda-project/soda/internal/llmgateway"
	"github.com/soda-project/soda/internal/sandbox"
)

// llmConfig is what --llm, --llm-key, --upstream-ca and --llm-budget ask
// for: the model gateway's routes with their real keys, checked, not
// started yet.
type llmConfig struct {
	routes []llmgateway.Route
	roots  *x509.CertPool
	budget int64
}

// maxKeyBytes bounds a key file.
const maxKeyBytes = 16 << 10

// loadLLM reads the model gateway's flags (nil without --llm). A key is
// taken from --llm-key PROVIDER=FILE, else from the provider's usual
// variable in sodactl's environment; it never enters the sandbox, so an
// --env that would pass it (or the variables the gateway sets) is refused.
func loadLLM(ro *runOptions, lookup func(string) (string, bool)) (*llmConfig, error) {
	if len(ro.llm) == 0 {
		for _, o := range []struct {
			name string
			set  bool
		}{{"--llm-key", len(ro.llmKey) > 0}, {"--upstream-ca", len(ro.upstreamCA) > 0}, {"--llm-budget", ro.llmBudget != ""}} {
			if o.set {
				return nil, usagef("sodactl run", "%s goes with --llm PROVIDER", o.name)
			}
		}
		return nil, nil
	}
	if ro.noNetwork {
		return nil, usagef("sodactl run", "--no-network excludes --llm")
	}
	keyFiles := map[string]string{}
	for _, kv := range ro.llmKey {
		name, file, ok := strings.Cut(kv, "=")
		if !ok || file == "" {
			return nil, usagef("sodactl run", "--llm-key %s: want PROVIDER=FILE", kv)
		}
		keyFiles[name] = file
	}
	lc := &llmConfig{}
	for _, spec := range ro.llm {
		name, upstream, _ := strings.Cut(spec, "=")
		p, err := llmgateway.Lookup(name)
		if err != nil {
			return nil, usagef("sodactl run", "--llm %s: %v", spec, err)
		}
		if slices.ContainsFunc(lc.routes, func(r llmgateway.Route) bool { return r.Provider.Name == name }) {
			return nil, usagef("sodactl run", "--llm %s: given twice", name)
		}
		r := llmgateway.Route{Provider: p}
		if upstream != "" {
			if r.Upstream, err = llmgateway.ParseUpstream(upstream); err != nil {
				return nil, usagef("sodactl run", "--llm %s: %v", spec, err)
			}
		}
		if r.Key, err = llmKey(p, keyFiles[name], lookup); err != nil {
			return nil, err
		}
		delete(keyFiles, name)
		lc.routes = append(lc.routes, r)
	}
	for name := range keyFiles {
		return nil, usagef("sodactl run", "--llm-key %s: no --llm %s", name, name)
	}
	if err := lc.checkEnv(ro.env, lookup); err != nil {
		return nil, err
	}
	if len(ro.upstreamCA) > 0 {
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
		lc.roots = pool
	}
	if ro.llmBudget != "" {
		n, err := strconv.ParseInt(ro.llmBudget, 10, 64)
		if err != nil || n <= 0 {
			return nil, usagef("sodactl run", "--llm-budget %s: want a positive number of tokens", ro.llmBudget)
		}
		lc.budget = n
	}
	return lc, nil
}

// llmKey is p's real key: from file, else from p's variable.
func llmKey(p llmgateway.Provider, file string, lookup func(string) (string, bool)) (string, error) {
	var key string
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--llm-key %s: %w", p.Name, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxKeyBytes+1))
		if err != nil {
			return "", fmt.Errorf("--llm-key %s: read %s: %w", p.Name, file, err)
		}
		if len(b) > maxKeyBytes {
			return "", fmt.Errorf("--llm-key %s: %s is over %d bytes: not a key", p.Name, file, maxKeyBytes)
		}
		key = strings.TrimSpace(string(b))
	} else {
		key, _ = lookup(p.KeyEnv)
		key = strings.TrimSpace(key)
	}
	if key == "" {
		return "", fmt.Errorf("--llm %s: no key: set %s in sodactl's environment or give --llm-key %s=FILE (a systemd credential's path will do); the sandbox gets a placeholder, never the key", p.Name, p.KeyEnv, p.Name)
	}
	if strings.ContainsAny(key, "\r\n\x00") {
		return "", fmt.Errorf("--llm %s: the key holds a line break or NUL", p.Name)
	}
	return key, nil
}

// checkEnv refuses an --env that would put a real key in the sandbox, or
// set a variable the gateway sets.
func (lc *llmConfig) checkEnv(env []string, lookup func(string) (string, bool)) error {
	for _, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			v, _ = lookup(k)
		}
		for _, r := range lc.routes {
			if k == r.Provider.KeyEnv || k == r.Provider.BaseURLEnv || slices.Contains(r.Provider.MoreKeyEnv, k) {
				return usagef("sodactl run", "--env %s: with --llm %s the sandbox gets %s from the model gateway (a placeholder key, never the real one); drop --env %s", k, r.Provider.Name, k, k)
			}
			if v != "" && strings.Contains(v, r.Key) {
				return usagef("sodactl run", "--env %s: its value holds the --llm %s key, which must stay on the host", k, r.Provider.Name)
			}
		}
	}
	return nil
}

// llmGateway is a started model gateway and the sandbox its records go to.
type llmGateway struct {
	gw   *llmgateway.Gateway
	port uint16
	sb   atomic.Pointer[sandbox.Sandbox]
}

// start serves lc's gateway on an ephemeral port of the host's loopback.
func (lc *llmConfig) start(log *slog.Logger) (*llmGateway, error) {
	if lc == nil {
		return nil, nil
	}
	g := &llmGateway{}
	gw, err := llmgateway.New(llmgateway.Config{
		Routes: lc.routes, RootCAs: lc.roots, Budget: lc.budget, Log: log,
		Record: func(ev llmgateway.Event) {
			if sb := g.sb.Load(); sb != nil {
				sb.RecordModel(ev)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("model gateway: %w", err)
	}
	g.gw, g.port = gw, uint16(ln.Addr().(*net.TCPAddr).Port)
	gw.Start(ln)
	return g, nil
}

// apply relays the gateway's port into the sandbox and points the
// agents at it.
func (g *llmGateway) apply(spec *sandbox.Spec) {
	if g == nil {
		return
	}
	spec.Egress.MCPPorts = append(spec.Egress.MCPPorts, g.port)
	spec.TrustedEnv = append(spec.TrustedEnv, g.gw.Env(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(g.port))))...)
}

// attach sends the gateway's records to sb's audit trail.
func (g *llmGateway) attach(sb *sandbox.Sandbox) {
	if g != nil {
		g.sb.Store(sb)
	}
}

// close stops the gateway and says what the run spent.
func (g *llmGateway) close(stderr io.Writer) {
	if g == nil {
		return
	}
	_ = g.gw.Close()
	u := g.gw.Usage()
	fmt.Fprintf(stderr, "sodactl: model usage: %d input, %d output tokens (%d cache read, %d cache write)\n", u.Input, u.Output, u.CacheRead, u.CacheWrite)
}
