package egress

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInert(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.example.com:443", "api.example.com:443"},
		{"GET $(touch${IFS}/tmp/PWNED) HTTP/1.1", `GET \x24\x28touch\x24\x7bIFS\x7d/tmp/PWNED\x29 HTTP/1.1`},
		{"a`id`b", `a\x60id\x60b`},
		{"q\"'\\", `q\x22\x27\x5c`},
		{"line\r\nforged", `line\x0d\x0aforged`},
		{"é", `\xc3\xa9`},
		{strings.Repeat("a", 10), "aaaa...(+6 bytes)"},
	} {
		max := 64
		if len(tc.in) == 10 {
			max = 4
		}
		if got := Inert(tc.in, max); got != tc.want {
			t.Errorf("Inert(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestInertInShell is the attack: a rendering appended to a shell script
// and run must not execute anything.
func TestInertInShell(t *testing.T) {
	dir := t.TempDir()
	pwned := filepath.Join(dir, "PWNED")
	hostile := []string{
		"GET $(touch${IFS}" + pwned + ") HTTP/1.1",
		"GET `touch " + pwned + "` HTTP/1.1",
		"x; touch " + pwned,
		"x\ntouch " + pwned,
		"x' ; touch " + pwned + " ; '",
		"x\" ; touch " + pwned + " ; \"",
		"x | touch " + pwned,
		"x && touch " + pwned,
	}
	var script strings.Builder
	for _, h := range hostile {
		// As the JSON audit would have it, and bare.
		script.WriteString(`{"target":"` + Inert(h, 256) + `"}` + "\n")
		script.WriteString(Inert(h, 256) + "\n")
		script.WriteString("echo \"" + Inert(h, 256) + "\"\n")
	}
	path := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o700); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command("sh", path).Run() // syntax and command errors expected
	if _, err := os.Stat(pwned); err == nil {
		t.Fatalf("running the rendered records created %s:\n%s", pwned, script.String())
	}
	// The control: the raw text does execute.
	raw := filepath.Join(dir, "raw.sh")
	if err := os.WriteFile(raw, []byte(`{"target":"`+hostile[0]+`"}`+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command("sh", raw).Run()
	if _, err := os.Stat(pwned); err != nil {
		t.Fatalf("control: the raw request line did not execute in sh (%v); the test proves nothing", err)
	}
}

// TestProxyAuditInert is the attack on the audit trail through the proxy:
// whatever the agent sends, the event's target and reason carry no byte
// that a shell, a terminal or a JSON reader would act on.
func TestProxyAuditInert(t *testing.T) {
	for _, line := range []string{
		"GET $(touch${IFS}/tmp/PWNED) HTTP/1.1",
		"CONNECT `id`:443 HTTP/1.1",
		"CONNECT a.example:443 $(id)",
		"CONNECT a.example:4$(id) HTTP/1.1",
		"CONNECT a\x1b[2Jb:443 HTTP/1.1",
	} {
		t.Run(line, func(t *testing.T) {
			e := newProxyEnv(t, Policy{ProxyPort: testProxyPort}, nil)
			c := e.conn(t, testProxyPort)
			if _, err := c.Write([]byte(line + "\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			ev := e.rec.next(t)
			for _, f := range []string{ev.Target, ev.Reason} {
				if i := strings.IndexAny(f, "$`\"';|&<>\n\r\x1b"); i >= 0 {
					t.Errorf("event field %q holds %q raw", f, f[i])
				}
			}
			if ev.Decision != DecisionDeny {
				t.Errorf("decision %q", ev.Decision)
			}
		})
	}
}
