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
	engine := testEngine(t, func(c *Config) { c.Audit = func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() } })
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
		t.Skip("host lacks: no git on this host")
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
pgrep -f '^soda-sandbox-guar[d]' >/dev/null && echo guard=running
kill -9 $(pgrep -f '^soda-sandbox-guar[d]') 2>/dev/null && echo guard=killed || echo guard=unkillable
grep CapEff /proc/$(pgrep -f '^soda-sandbox-guar[d]')/status
`, ws, hookMark, fsmonMark)
	st, out, errOut, recs := runAudited(t, ws, "/bin/sh", "-c", script)
	t.Logf("out:\n%s\nstderr:\n%s", out, errOut)
	if st.Code != 0 {
		t.Fatalf("script exit %d", st.Code)
	}
	// The agent can neither stop the guard nor borrow its privilege
	// beyond CAP_SYS_ADMIN in the sandbox's mount namespace.
	if !strings.Contains(out, "guard=running") || !strings.Contains(out, "guard=unkillable") || !strings.Contains(out, "CapEff:\t0000000000200000") {
		t.Errorf("the guard: want running, unkillable, CAP_SYS_ADMIN only: %s", out)
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
print "written=$w\n";
use Time::HiRes qw(time); my @us;
for my $i (1..50) { my $d = "m$i/.git"; mkdir "m$i"; my $t0 = time; mkdir $d; mkdir "$d/hooks";
  while (open(my $f, ">", "$d/hooks/x")) { close $f; unlink "$d/hooks/x"; last if time - $t0 > 1 } push @us, (time - $t0) * 1e6 }
@us = sort { $a <=> $b } @us; printf "window-us median=%%.0f max=%%.0f\n", $us[25], $us[49];`, n, ws)
	script := fmt.Sprintf(`cd %[1]s && /usr/bin/perl -e '%[2]s'
for i in 1 2 3 4 5; do mkdir -p cwd$i/.git/hooks; (cd cwd$i/.git/hooks && sleep 0.2 && printf '#!/bin/sh\n' > post-checkout && chmod +x post-checkout && echo cwd$i=written); done
# A working directory in hooks for sure before it is a repository's: the
# directory becomes .git by rename, then the hook is written through it.
mkdir -p late/tmp/hooks && (cd late/tmp/hooks && mv %[1]s/late/tmp %[1]s/late/.git && sleep 0.2 && printf '#!/bin/sh\ntouch %[1]s/pwned\n' > post-checkout && echo late=written; chmod +x post-checkout)
# The hook of the last one is written just before the command ends.
mkdir -p last/tmp/hooks && cd last/tmp/hooks && mv %[1]s/last/tmp %[1]s/last/.git && sleep 0.1 && printf '#!/bin/sh\n' > post-checkout && echo last=written; chmod +x post-checkout; true`, ws, perl)
	st, out, errOut, recs := runAudited(t, ws, "/bin/sh", "-c", script)
	t.Logf("out:\n%s\nstderr:\n%s", out, errOut)
	if st.Code != 0 {
		t.Fatalf("script exit %d", st.Code)
	}
	left, _ := filepath.Glob(filepath.Join(ws, "*/.git/hooks/*"))
	if len(left) > 0 {
		t.Errorf("%d hooks left after the run, e.g. %s", len(left), left[0])
	}
	// What was written through the old working directory is quarantined,
	// not executable, and audited.
	if strings.Contains(out, "late=written") {
		q, _ := filepath.Glob(filepath.Join(ws, "late/.git/soda-quarantine/post-checkout.*"))
		if len(q) != 1 {
			t.Errorf("late: quarantine holds %v", q)
		} else if fi, err := os.Stat(q[0]); err != nil || fi.Mode()&0o111 != 0 {
			t.Errorf("late: quarantined hook %s is executable (%v)", q[0], err)
		}
	} else {
		t.Errorf("late: the write through a working directory taken before the protection failed; the test shows nothing")
	}
	quarantined, protected := 0, 0
	for _, r := range recs {
		switch {
		case r.Event == "refused" && strings.Contains(r.Detail, "soda-quarantine"):
			quarantined++
		case r.Event == "protected":
			protected++
		}
	}
	t.Logf("%d repositories protected, %d quarantine records", protected, quarantined)
	if protected < n+57 || quarantined == 0 {
		t.Errorf("audit: %d protected (want %d), %d quarantine records", protected, n+57, quarantined)
	}
}

// TestNewRepoOtherShapes: a bare repository, and a git directory named by
// a .git file before it exists, are protected too.
func TestNewRepoOtherShapes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("host lacks: no git on this host")
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`cd %[1]s
git init -q --bare bare.git && echo bare=ok
printf '#!/bin/sh\n' > bare.git/hooks/post-receive && echo bare-hook=written
mkdir wt && echo "gitdir: ../elsewhere" > wt/.git
mkdir -p elsewhere/refs && echo 'ref: refs/heads/master' > elsewhere/HEAD && sleep 0.1
printf '#!/bin/sh\n' > elsewhere/hooks/post-checkout && echo gitfile-hook=written
printf '[core]\n\tbare = false\n[alias]\n\tst = !touch %[1]s/pwned\n' > elsewhere/config && sleep 0.2 && cat elsewhere/config
git init -q main && cd main && git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m x && git worktree add -q ../linked && sleep 0.1 && git worktree remove ../linked && echo worktree=ok
true`, ws)
	st, out, errOut, _ := runAudited(t, ws, "/bin/sh", "-c", script)
	t.Logf("out:\n%s\nstderr:\n%s", out, errOut)
	if st.Code != 0 || !strings.Contains(out, "bare=ok") || !strings.Contains(out, "worktree=ok") {
		t.Fatalf("script exit %d", st.Code)
	}
	for _, p := range []string{"bare.git/hooks/post-receive", "elsewhere/hooks/post-checkout"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s left after the run", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "elsewhere/config")); strings.Contains(string(b), "touch") {
		t.Errorf("the alias is left in the configuration: %s", b)
	}
}
