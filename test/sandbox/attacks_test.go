package sandboxtest

import (
	"fmt"
	"strings"
	"testing"
)

// asEach runs f as root and as the test user, with the arguments every
// run of that user needs (an ordinary user waives the cgroup layer on this
// hybrid host: see runBattery).
func asEach(t *testing.T, f func(t *testing.T, user, who string, pre []string)) {
	for _, user := range []string{"", testUser} {
		who, pre := "root", []string(nil)
		if user != "" {
			who, pre = user, []string{"--allow-degraded", "cgroup"}
		}
		t.Run(who, func(t *testing.T) { f(t, user, who, pre) })
	}
}

// TestPlantedLinkGrant: an agent plants rootlink -> /root in its
// workspace; a later run that grants ws/rootlink must be refused, naming
// the link and its target, instead of mounting /root.
func TestPlantedLinkGrant(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		ws := e.bin + "/ws-link-" + who
		if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s && chown %[2]s %[1]s", ws, who)); r.err != nil {
			t.Fatal(r)
		}
		// Run 1: the agent plants the link.
		if r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--", "ln", "-s", "/root", ws+"/rootlink")...); r.err != nil {
			t.Fatalf("plant the link: %s", r)
		}
		// Run 2: the user grants what looks like a workspace directory.
		marker := "/root/soda-link-marker"
		e.exec(execOpts{}, "rm", "-f", marker)
		r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws+"/rootlink", "--", "touch", ws+"/rootlink/soda-link-marker")...)
		if r.code != 125 || !strings.Contains(r.stderr, ws+"/rootlink is a symbolic link to /root") {
			t.Errorf("grant through a planted link: want exit 125 naming the link and its target: %s", r)
		}
		if c := e.exec(execOpts{}, "ls", marker); c.err == nil {
			t.Errorf("the run wrote %s through the link", marker)
		}
		e.noLeftovers(t)
	})
}

// TestHomeOwnTmpfs: the home is a tmpfs of the sandbox's own, limited in
// size and inodes: a big write fails inside (ENOSPC) instead of filling
// the host's /run, and so does a flood of small files.
func TestHomeOwnTmpfs(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		r := e.sodactl(execOpts{user: user}, append(pre, "--", "sh", "-c", `stat -f -c '%T' "$HOME"; df -B1 --output=size "$HOME" | tail -1`)...)
		if r.err != nil {
			t.Fatalf("default home: %s", r)
		}
		if f := strings.Fields(r.stdout); len(f) != 2 || f[0] != "tmpfs" || f[1] != "536870912" {
			t.Errorf("default home: got %q, want a 512 MiB tmpfs", r.stdout)
		}
		r = e.sodactl(execOpts{user: user}, append(pre, "--home-size", "16M", "--", "sh", "-c",
			`dd if=/dev/zero of="$HOME/big" bs=1M count=64 2>&1; echo "dd=$?"`)...)
		if r.err != nil || !strings.Contains(r.stdout, "No space left on device") || strings.Contains(r.stdout, "dd=0") {
			t.Errorf("64 MiB into a 16 MiB home: want ENOSPC inside the sandbox: %s", r)
		}
		r = e.sodactl(execOpts{user: user}, append(pre, "--home-size", "8M", "--", "sh", "-c",
			`i=0; while [ $i -lt 3000 ]; do printf "" > "$HOME/f$i" || break; i=$((i+1)); done; echo "files=$i"`)...)
		if r.err != nil || strings.Contains(r.stdout, "files=3000") || !strings.Contains(r.stderr+r.stdout, "No space left") {
			t.Errorf("3000 files in an 8 MiB home (1024 inodes): want ENOSPC: %s", r)
		}
		e.noLeftovers(t)
	})
}

// TestAuditFileAttacks: the audit file may not be where the agent can
// reach it (a grant), nor a link planted towards a root-only script; what
// the agent sends is recorded inert (the file, run as a script, runs
// nothing); and the file is capped with a summary of what was left out.
func TestAuditFileAttacks(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		ws := e.bin + "/ws-audit-" + who
		out := e.bin + "/audit-out-" + who
		victim := out + "/victim.sh"
		setup := fmt.Sprintf("rm -rf %[1]s %[2]s && mkdir -p %[1]s %[2]s && chown %[3]s %[1]s %[2]s && printf '#!/bin/sh\\n' > %[4]s && chmod 0700 %[4]s && ln -s %[4]s %[2]s/planted.jsonl && chown -h %[3]s %[2]s/planted.jsonl",
			ws, out, who, victim)
		if r := e.exec(execOpts{}, "sh", "-c", setup); r.err != nil {
			t.Fatal(r)
		}
		// In the workspace: refused before anything runs.
		r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--audit-json", ws+"/audit.jsonl", "--", "true")...)
		if r.code != 125 || !strings.Contains(r.stderr, "inside the granted directory") {
			t.Errorf("audit file in a grant: want exit 125 naming the grant: %s", r)
		}
		// A planted link: refused, and its target untouched.
		r = e.sodactl(execOpts{user: user}, append(pre, "--audit-json", out+"/planted.jsonl", "--", "true")...)
		if r.code != 125 || !strings.Contains(r.stderr, "symbolic link") {
			t.Errorf("audit file through a planted link: want exit 125: %s", r)
		}
		// What the agent sends is recorded inert; the file is capped.
		audit := out + "/audit.jsonl"
		pwned := "/tmp/PWNED-" + who
		e.exec(execOpts{}, "rm", "-f", pwned)
		flood := fmt.Sprintf(`import socket
d = chr(36)  # the dollar sign, kept out of argv (the start record has argv as the user gave it)
lines = ["GET " + d + "(touch" + d + "{IFS}%s) HTTP/1.1"] + ["CONNECT flood%%d.example:443 HTTP/1.1" %% i for i in range(300)]
for l in lines:
    s = socket.create_connection(("127.0.0.1", 18080))
    s.sendall((l + "\r\n\r\n").encode())
    s.recv(100)
    s.close()
`, pwned)
		r = e.sodactl(execOpts{user: user}, append(pre, "--audit-json", audit, "--audit-json-max", "16K", "--", "python3", "-c", flood)...)
		if r.err != nil {
			t.Fatalf("hostile run: %s", r)
		}
		content := e.exec(execOpts{}, "cat", audit).stdout
		if strings.Contains(content, "$(") || !strings.Contains(content, `\\x24\\x28touch`) {
			t.Errorf("the hostile request line is not recorded inert:\n%s", content)
		}
		e.exec(execOpts{}, "sh", audit)
		if c := e.exec(execOpts{}, "ls", pwned); c.err == nil {
			t.Errorf("running the audit file as a script executed the agent's command")
		}
		if len(content) > 16<<10+4096 || !strings.Contains(content, `"event":"dropped"`) {
			t.Errorf("audit file of %d bytes with a 16K cap, want a dropped summary", len(content))
		}
		if v := e.exec(execOpts{}, "cat", victim).stdout; v != "#!/bin/sh\n" {
			t.Errorf("the victim script changed: %q", v)
		}
		e.noLeftovers(t)
	})
}
