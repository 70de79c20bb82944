// Package keystest checks, for real on this host, that keys stay on the
// host. With the model gateway (sodactl run --llm) the real Claude Code
// CLI in a real sandbox asks a loopback
// TLS server that speaks the Messages API (the test's own CA, which the
// host side is told to trust with --upstream-ca), and the tests check
// that the real key reached that server, that nothing inside the sandbox
// ever held it, that a wrong key and a spent budget are refused there,
// and that the audit trail has each request with its tokens. The real
// Codex and OpenCode CLIs do the same against a fake of OpenAI's API
// (openai_test.go). With --secret and --allow-http (secrets_test.go) curl,
// git and Python in the sandbox reach loopback HTTPS servers through the
// proxy's TLS termination, which puts the real values in place of the
// placeholders.
//
// It needs root (sodactl run's sandbox on this host, as test/hostbattery)
// and npm to install the pinned Claude Code CLI (test/sandbox/claude-code)
// and the Codex and OpenCode CLIs (test/sandbox/agents).
package keystest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soda-project/soda/test/testkit"
)

// answer is what the fake model says; Claude Code must print it.
const answer = "soda-gateway-answer-7c1e"

// Token counts the fake reports for each message: Claude Code's stream
// gets message_start with input tokens, then cumulative message_deltas.
const (
	inTokens  = 17
	outTokens = 9
)

type env struct {
	bin      string // sodactl and soda-sandbox-init
	caFile   string
	upstream *fakeAnthropic
	key      string
	cert     tls.Certificate // the upstreams' certificate, signed by caFile's CA
	// hostEnv is more of sodactl's environment (another provider's key).
	hostEnv []string
}

// fakeAnthropic is a loopback HTTPS server speaking enough of Anthropic's
// Messages API for Claude Code: JSON or SSE answers with usage.
type fakeAnthropic struct {
	srv *httptest
	mu  sync.Mutex
	// keys are the x-api-key values of the requests that reached it.
	keys  []string
	paths []string
}

type httptest struct {
	ln  net.Listener
	url string
	srv *http.Server
}

func setup(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		testkit.SkipHostLacks(t, "root: sodactl run's sandbox on this host needs it here (CI runs as root)")
	}
	testkit.RequireSandbox(t)
	bin, err := testkit.BuildBinaries("soda-llm-", "sodactl", "soda-sandbox-init")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	// The binaries' directory is read by the sandbox's init as root
	// only: 0755 like an installed /usr/libexec.
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	e := &env{bin: bin, key: "sk-ant-real-" + hex.EncodeToString(b)}
	certPEM, keyPEM, caPEM := testCA(t)
	e.caFile = filepath.Join(bin, "ca.pem")
	if err := os.WriteFile(e.caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	e.cert = cert
	e.upstream = startFake(t, cert, e.key)
	return e
}

// testCA makes a CA and a certificate for 127.0.0.1 signed by it.
func testCA(t *testing.T, ips ...string) (certPEM, keyPEM, caPEM []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "soda test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func startFake(t *testing.T, cert tls.Certificate, key string) *fakeAnthropic {
	t.Helper()
	f := &fakeAnthropic{}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.keys = append(f.keys, r.Header.Get("X-Api-Key"))
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		if r.Header.Get("X-Api-Key") != key {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		var req struct {
			Stream bool `json:"stream"`
			Model  string
		}
		_ = json.Unmarshal(body, &req)
		if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"input_tokens":1}`)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`,
				req.Model, answer, inTokens, outTokens)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data); fl.Flush() }
		ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, req.Model, inTokens))
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, answer))
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`)
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, outTokens))
		ev("message_stop", `{"type":"message_stop"}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	f.srv = &httptest{ln: ln, url: "https://" + ln.Addr().String(), srv: srv}
	return f
}

func (f *fakeAnthropic) seen() (keys, paths []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...), append([]string(nil), f.paths...)
}

// run runs sodactl run with args, the real key in its environment.
func (e *env) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "sodactl"), append([]string{"run", "--direct"}, args...)...)
	cmd.Env = append(append(os.Environ(), "ANTHROPIC_API_KEY="+e.key), e.hostEnv...)
	cmd.Dir = e.bin
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("sodactl run %v did not end within 3 minutes\nstdout: %s\nstderr: %s", args, o.String(), er.String())
	}
	return o.String(), er.String(), cmd.ProcessState.ExitCode()
}

// llmRecords are the audit file's llm records.
func llmRecords(t *testing.T, file string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Event string         `json:"event"`
			LLM   map[string]any `json:"llm"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Event == "llm" {
			out = append(out, r.LLM)
		}
	}
	return out
}

func (e *env) gateway() []string {
	return []string{"--llm", "anthropic=" + e.upstream.srv.url, "--upstream-ca", e.caFile}
}

// TestClaudeThroughGateway: the real Claude Code CLI, given only the
// placeholder, gets its answer from the upstream, which saw the real key.
func TestClaudeThroughGateway(t *testing.T) {
	e := setup(t)
	claude := claudeCLI(t)
	ccDir := filepath.Dir(filepath.Dir(filepath.Dir(claude)))
	if out, err := exec.Command(claude, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "Claude Code") {
		t.Fatalf("control: claude --version on the host: %v %s", err, out)
	}
	audit := filepath.Join(e.bin, "audit.jsonl")
	args := append(e.gateway(), "--ro", ccDir, "--audit-json", audit, "--", claude, "-p", "Say the magic word.")
	stdout, stderr, code := e.run(t, args...)
	if code != 0 || !strings.Contains(stdout, answer) {
		t.Fatalf("claude -p through the gateway: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	keys, paths := e.upstream.seen()
	msgs := 0
	for i, k := range keys {
		if k != e.key {
			t.Errorf("request %d (%s) reached the upstream with x-api-key %q, not the real key", i, paths[i], k)
		}
		if strings.HasSuffix(paths[i], "/v1/messages") {
			msgs++
		}
	}
	if msgs == 0 {
		t.Fatalf("no /v1/messages request reached the upstream (paths %v)", paths)
	}
	t.Logf("claude printed %q; the upstream got %d requests (%v), %d of them messages", strings.TrimSpace(stdout), len(paths), paths, msgs)
	recs := llmRecords(t, audit)
	if len(recs) != len(keys) {
		t.Errorf("%d llm audit records for %d requests", len(recs), len(keys))
	}
	var in, out float64
	for _, r := range recs {
		u, _ := r["usage"].(map[string]any)
		in += u["input_tokens"].(float64)
		out += u["output_tokens"].(float64)
		if r["status"].(float64) != 200 {
			t.Errorf("audit record %v", r)
		}
	}
	if in != float64(msgs*inTokens) || out != float64(msgs*outTokens) {
		t.Errorf("audited tokens %v in, %v out; the upstream reported %d, %d for %d messages", in, out, msgs*inTokens, msgs*outTokens, msgs)
	}
	if want := fmt.Sprintf("model usage: %d input, %d output tokens", msgs*inTokens, msgs*outTokens); !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q: %s", want, stderr)
	}
	if b, _ := os.ReadFile(audit); bytes.Contains(b, []byte(e.key)) {
		t.Error("the audit file holds the real key")
	}
}

// TestKeyNeverInside: everything a process in the sandbox can read of
// itself and its home holds the placeholder and never the key. The
// sandbox dumps it; the host searches the dump (the sandbox never knows
// what to look for, so the search cannot match itself).
func TestKeyNeverInside(t *testing.T) {
	e := setup(t)
	script := `env; echo; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done;
find "$HOME" /tmp /var/tmp /dev/shm -type f -size -2M -exec cat {} + 2>/dev/null; echo; echo END`
	stdout, stderr, code := e.run(t, append(e.gateway(), "--", "sh", "-c", script)...)
	if code != 0 || !strings.Contains(stdout, "END") {
		t.Fatalf("dump: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Control: the dump holds what the sandbox was given.
	if !strings.Contains(stdout, "ANTHROPIC_API_KEY=sk-ant-soda-") || !strings.Contains(stdout, "ANTHROPIC_BASE_URL=http://127.0.0.1:") {
		t.Fatalf("control: the dump lacks the placeholder and the gateway's URL:\n%s", stdout)
	}
	if strings.Contains(stdout, e.key) || strings.Contains(stdout, e.key[12:]) {
		t.Fatal("the real key was readable inside the sandbox")
	}
	if strings.Contains(stderr, e.key) {
		t.Fatal("sodactl printed the real key")
	}
}

// TestRefusedInside: from inside, a request with another key, or once the
// budget is spent, is answered by the gateway and never reaches the
// upstream; the placeholder sent straight to the upstream goes nowhere.
func TestRefusedInside(t *testing.T) {
	e := setup(t)
	script := `u="$ANTHROPIC_BASE_URL/v1/messages"
req() { curl -s -o /dev/null -w '%{http_code}\n' -H "x-api-key: $1" -H 'content-type: application/json' -d '{"model":"m","max_tokens":1,"messages":[]}' "$u"; }
req wrong-key; req "$ANTHROPIC_API_KEY"; req "$ANTHROPIC_API_KEY"; req "$ANTHROPIC_API_KEY"`
	audit := filepath.Join(e.bin, "refused.jsonl")
	budget := fmt.Sprint(inTokens + outTokens + 1) // the second answered request spends it
	before, _ := e.upstream.seen()
	stdout, stderr, code := e.run(t, append(e.gateway(), "--llm-budget", budget, "--audit-json", audit, "--", "sh", "-c", script)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if got := strings.Fields(stdout); strings.Join(got, " ") != "401 200 200 403" {
		t.Fatalf("statuses %v, want 401 (another key) 200 200 403 (budget spent)\nstderr: %s", got, stderr)
	}
	after, _ := e.upstream.seen()
	if n := len(after) - len(before); n != 2 {
		t.Fatalf("%d requests reached the upstream, want the 2 answered", n)
	}
	recs := llmRecords(t, audit)
	if len(recs) != 4 || !strings.Contains(fmt.Sprint(recs[0]["refused"]), "placeholder") || !strings.Contains(fmt.Sprint(recs[3]["refused"]), "budget") {
		t.Fatalf("audit: %v", recs)
	}
}

// TestKeyOnCommandLine: what would put the key in the sandbox is refused
// before anything starts.
func TestKeyOnCommandLine(t *testing.T) {
	e := setup(t)
	for _, args := range [][]string{
		{"--env", "ANTHROPIC_API_KEY"},
		{"--env", "OTHER=" + e.key},
	} {
		_, stderr, code := e.run(t, append(append(e.gateway(), args...), "--", "true")...)
		if code != 125 || strings.Contains(stderr, e.key) || !strings.Contains(stderr, "--env") {
			t.Errorf("%v: exit %d, stderr %s", args, code, stderr)
		}
	}
	keys, _ := e.upstream.seen()
	if len(keys) != 0 {
		t.Errorf("the upstream got %d requests", len(keys))
	}
}

// claudeCLI installs the pinned Claude Code CLI (test/sandbox/claude-code)
// unless it is installed and as new as its lock file, and returns its
// claude command.
func claudeCLI(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../sandbox/claude-code")
	if err != nil {
		t.Fatal(err)
	}
	lock, lerr := os.Stat(filepath.Join(dir, "package-lock.json"))
	inst, ierr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if lerr != nil || ierr != nil || inst.ModTime().Before(lock.ModTime()) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			testkit.SkipHostLacks(t, "npm, to install test/sandbox/claude-code: %v", err)
		}
		if out, err := exec.Command(npm, "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput(); err != nil {
			t.Fatalf("npm ci --prefix %s: %v\n%s", dir, err, out)
		}
	}
	claude := filepath.Join(dir, "node_modules", ".bin", "claude")
	if _, err := os.Stat(claude); err != nil {
		t.Fatalf("npm installed no claude: %v", err)
	}
	return claude
}
