package keystest

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/soda-project/soda/test/testkit"
)

// recordingServer is a loopback HTTPS server that records each request's
// method, path and credential headers, and answers "ok PATH" (401 with a
// Basic challenge for git's first, anonymous request).
type recordingServer struct {
	addr string
	mu   sync.Mutex
	reqs []string // "METHOD PATH Authorization=... X-Token=..."
}

func startRecording(t *testing.T, cert tls.Certificate, host string) *recordingServer {
	t.Helper()
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	s := &recordingServer{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, fmt.Sprintf("%s %s Authorization=%s X-Token=%s", r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Token")))
		s.mu.Unlock()
		if strings.Contains(r.URL.Path, ".git/") && r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *recordingServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// hostAddr is an IPv4 address of this host that is not loopback: the
// sandbox's NO_PROXY covers loopback, so its clients reach this one
// through the proxy (with --allow-private, as it is the host's own).
func hostAddr(t *testing.T) string {
	t.Helper()
	ifs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range ifs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	testkit.SkipHostLacks(t, "an IPv4 address other than loopback (interfaces: %v, %v)", ifs, err)
	return ""
}

// TestSecretsThroughProxy: curl, git and Python's urllib in the sandbox
// send the placeholder of a --secret; the server it is for gets the real
// value (a bearer token, Basic credentials, a custom header); the same
// placeholder sent to another terminated host is refused and audited;
// an --allow-http rule refuses a method and a path with the documented 403.
func TestSecretsThroughProxy(t *testing.T) {
	e := setup(t)
	ip := hostAddr(t)
	certPEM, keyPEM, caPEM := testCA(t, ip)
	ca := filepath.Join(e.bin, "secrets-ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	a := startRecording(t, cert, ip)
	b := startRecording(t, cert, ip)
	_, pa, _ := net.SplitHostPort(a.addr)
	_, pb, _ := net.SplitHostPort(b.addr)
	hostA, hostB := ip+":"+pa, ip+":"+pb
	const realA, realB = "real-A-3f1d9c0b7e", "real-B-8a2e4d6f1c"

	script := fmt.Sprintf(`set -u
echo "placeholder: $TOKEN_A"
curl -sS https://%[1]s/curl -H "Authorization: Bearer $TOKEN_A"
git -c credential.helper= ls-remote "https://x:$TOKEN_A@%[1]s/repo.git" >/dev/null 2>&1; echo "git: $?"
python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request("https://%[1]s/py", headers={"X-Token": os.environ["TOKEN_A"]})).read().decode().strip())'
curl -s -o /dev/null -w 'exfil %%{http_code}\n' https://%[2]s/ok -H "X-Token: $TOKEN_A"
curl -s -w ' post %%{http_code}\n' -X POST https://%[2]s/ok -H "X-Token: $TOKEN_B"
curl -s -o /dev/null -w 'path %%{http_code}\n' https://%[2]s/admin -H "X-Token: $TOKEN_B"
curl -sS https://%[2]s/ok/deeper -H "X-Token: $TOKEN_B"
`, hostA, hostB)
	audit := filepath.Join(e.bin, "secrets.jsonl")
	keyA := filepath.Join(e.bin, "token-b")
	if err := os.WriteFile(keyA, []byte(realB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--secret", "TOKEN_A@" + hostA, "--secret", "TOKEN_B=" + keyA + "@" + hostB,
		"--allow-private", hostA + "," + hostB, "--allow-http", "GET,HEAD " + hostB + "/ok",
		"--upstream-ca", ca, "--audit-json", audit, "--", "sh", "-c", script}
	t.Setenv("TOKEN_A", realA)
	stdout, stderr, code := e.run(t, args...)
	t.Logf("in the sandbox:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, realA) || strings.Contains(stdout, realB) {
		t.Fatal("a real value was readable in the sandbox")
	}
	for _, want := range []string{"placeholder: soda-placeholder-token_a-", "ok /curl", "ok /py", "exfil 403",
		"refused by the sandbox policy: POST " + hostB + "/ok is not allowed (--allow-http)\n post 403", "path 403", "ok /ok/deeper"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the sandbox's output lacks %q", want)
		}
	}
	gotA := strings.Join(a.seen(), "\n")
	for _, want := range []string{"GET /curl Authorization=Bearer " + realA,
		"GET /repo.git/info/refs Authorization=Basic " + basic("x", realA),
		"GET /py Authorization= X-Token=" + realA} {
		if !strings.Contains(gotA, want) {
			t.Errorf("server A lacks %q; it saw:\n%s", want, gotA)
		}
	}
	if strings.Contains(gotA, "soda-placeholder") {
		t.Errorf("a placeholder reached server A:\n%s", gotA)
	}
	gotB := b.seen()
	if len(gotB) != 1 || gotB[0] != "GET /ok/deeper Authorization= X-Token="+realB {
		t.Errorf("server B saw %q, want only GET /ok/deeper with the real B value", gotB)
	}
	// The audit has each terminated request, the exfiltration attempt
	// named, and never a value or a query.
	raw, _ := os.ReadFile(audit)
	if strings.Contains(string(raw), realA) || strings.Contains(string(raw), realB) || strings.Contains(string(raw), "soda-placeholder") {
		t.Error("the audit holds a value or a placeholder")
	}
	var exfil, refused, http200 int
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		var r struct {
			Event  string `json:"event"`
			Egress *struct {
				Kind, Target, Method, Path, Reason string
				Status                             int
			} `json:"egress"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Egress == nil || r.Egress.Kind != "http" {
			continue
		}
		switch {
		case strings.Contains(r.Egress.Reason, "exfiltration attempt") && strings.Contains(r.Egress.Reason, "TOKEN_A"):
			exfil++
		case r.Egress.Status == 403:
			refused++
		case r.Egress.Status == 200:
			http200++
		}
	}
	if exfil != 1 || refused != 2 || http200 < 3 {
		t.Errorf("audit: %d exfiltration attempts (want 1), %d refusals (want 2), %d answered (want ≥3)\n%s", exfil, refused, http200, raw)
	}
}

// basic is the credential of Authorization: Basic.
func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
