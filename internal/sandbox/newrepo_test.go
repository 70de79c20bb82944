package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runAudited runs argv in a sandbox with ws granted read-write and
// returns its status, output and audit records.
func runAudited(t *testing.T, ws string, argv ...string) (ExitStatus, string, string, []Record) {
	t.Helper()
	requireNamespaces(t)
	var mu sync.Mutex
	var recs []Record
	var stdout, stderr bytes.Buffer
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	done := make(chan struct{}, 2)
	go func() { _, _ = stdout.ReadFrom(outR); done <- struct{}{} }()
	go func() { _, _ = stderr.ReadFrom(errR); done <- struct{}{} }()
	spec := Spec{Argv: argv, Home: t.TempDir(), Stdout: outW, Stderr: errW, ReadWrite: []string{ws}, Dir: ws,
		AllowDegraded: []Layer{LayerCgroup}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	engine := &Linux{Audit: func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }}
	defer engine.Close()
	sb, err := engine.Start(ctx, spec)
	var st ExitStatus
	if err == nil {
		st, err = sb.Wait(ctx)
	}
	outW.Close()
	errW.Close()
	<-done
	<-done
	if err != nil {
		t.Fatalf("sandbox: %v (stderr %s)", err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return st, stdout.String(), stderr.String(), recs
}

// hostGit runs git on the host in dir, as the host user would.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "safe.directory=*"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestNewRepoProtected: a repository made during the run with git init
// gets read-only hooks (the planted hook is refused or removed) and a
// configuration that names a program is neutralised; after the run the
// host's git checkout and status run nothing of it, and the audit trail
// says what was protected and refused.
func TestNewRepoProtected(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIP: no git on this host")
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	hookMark := filepath.Join(ws, "pwned-hook")
	fsmonMark := filepath.Join(ws, "pwned-fsmonitor")
	script := fmt.Sprintf(`cd %[1]s
git init -q new && echo init=ok || echo init=failed
cd new && echo hi > f && git add f && git -c user.email=a@b -c user.name=agent commit -qm agent && echo commit=ok
if printf '#!/bin/sh\ntouch %[2]s\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout; then echo hook=written; else echo hook=refused; fi
git config core.fsmonitor 'touch %[3]s; false' && echo fsmonitor=set
sleep 0.3
echo fsmonitor-now=$(git config core.fsmonitor)
ls -la .git/hooks/
`, ws, hookMark, fsmonMark)
	st, out, errOut, recs := runAudited(t, ws, "/bin/sh", "-c", script)
	t.Logf("out:\n%s\nstderr:\n%s", out, errOut)
	if st.Code != 0 {
		t.Fatalf("script exit %d", st.Code)
	}
	if !strings.Contains(out, "init=ok") || !strings.Contains(out, "commit=ok") {
		t.Errorf("git init and commit inside the sandbox must work: %s", out)
	}
	// On the host: nothing planted runs.
	repo := filepath.Join(ws, "new")
	hostGit(t, repo, "checkout", "-q", "-b", "other")
	hostGit(t, repo, "status")
	for _, m := range []string{hookMark, fsmonMark} {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("the host's git ran what the sandbox planted: %s exists", m)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(repo, ".git/hooks")); len(ents) > 0 {
		t.Errorf("hooks left in the new repository: %v", ents)
	}
	if v := strings.TrimSpace(hostGit(t, repo, "config", "core.fsmonitor")); v != "" {
		t.Errorf("core.fsmonitor left in the new repository's config: %q", v)
	}
	var protected, refused bool
	for _, r := range recs {
		if r.Event == "protected" && strings.Contains(r.Detail, repo+"/.git") {
			protected = true
		}
		if r.Event == "refused" && strings.Contains(r.Detail, repo+"/.git") {
			refused = true
		}
	}
	if !protected || (!refused && strings.Contains(out, "hook=written")) || !strings.Contains(fmt.Sprint(recs), "fsmonitor") {
		t.Errorf("audit: protected=%v refused=%v; records: %+v", protected, refused, recs)
	}
}

// TestNewRepoRace: the agent races the protection, many times: it makes
// .git and writes an executable post-checkout at once (perl, no fork in
// between), and, through a working directory taken inside .git/hooks
// before the protection (which the read-only mount cannot cover), writes
// one later. After the run, no hook is left in any of them.
func TestNewRepoRace(t *testing.T) {
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	const n = 200
	perl := fmt.Sprintf(`for my $i (1..%d) { my $d = "r$i/.git"; mkdir "r$i"; mkdir $d; mkdir "$d/hooks";
  if (open(my $f, ">", "$d/hooks/post-checkout")) { print $f "#!/bin/sh\ntouch %s/pwned\n"; close $f; chmod 0755, "$d/hooks/post-checkout"; $w++ } }
print "written=$w\n";`, n, ws)
	script := fmt.Sprintf(`cd %[1]s && /usr/bin/perl -e '%[2]s'
for i in 1 2 3 4 5; do mkdir -p cwd$i/.git/hooks; (cd cwd$i/.git/hooks && sleep 0.2 && printf '#!/bin/sh\n' > post-checkout && chmod +x post-checkout && echo cwd$i=written); done
sleep 0.2`, ws, perl)
	st, out, errOut, _ := runAudited(t, ws, "/bin/sh", "-c", script)
	t.Logf("out:\n%s\nstderr:\n%s", out, errOut)
	if st.Code != 0 {
		t.Fatalf("script exit %d", st.Code)
	}
	left, _ := filepath.Glob(filepath.Join(ws, "*/.git/hooks/*"))
	if len(left) > 0 {
		t.Errorf("%d hooks left after the run, e.g. %s", len(left), left[0])
	}
}
