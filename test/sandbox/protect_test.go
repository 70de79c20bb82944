package sandboxtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// protectScript tries each planting an agent could leave for the host to
// run, one line "NAME=written" or "NAME=refused" each, and the ordinary
// writes that must keep working ("ok-" names).
func protectScript(ws, home string) string {
	lines := []string{
		`try() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$n=written"; else echo "$n=refused"; fi; }`,
		`export R=` + ws + `/repo N=` + ws + `/new H=` + home,
		// The repository that was there when the run started.
		`try hook sh -c 'printf "#!/bin/sh\ntouch /tmp/pwned\n" > $R/.git/hooks/post-checkout && chmod +x $R/.git/hooks/post-checkout'`,
		`try hook-sample sh -c 'echo x >> $R/.git/hooks/pre-commit.sample'`,
		`try config git -C $R config core.hooksPath /tmp`,
		`try config-append sh -c 'echo "[core]" >> $R/.git/config'`,
		`try config-unlink rm -f $R/.git/config`,
		`try config-worktree sh -c 'echo "[core]" > $R/.git/config.worktree'`,
		`try ok-commit sh -c 'cd $R && echo hi > f && git add f && git -c user.email=a@b -c user.name=agent commit -qm agent'`,
		`try ok-file touch $R/notes`,
		// A repository the agent makes during the run.
		`git init -q $N`,
		`try new-hook sh -c 'printf "#!/bin/sh\ntouch /tmp/pwned\n" > $N/.git/hooks/post-checkout && chmod +x $N/.git/hooks/post-checkout'`,
		// git writes the configuration (by rename: no mount can refuse it);
		// the guard takes the key out again at once.
		`try new-config sh -c 'git -C $N config core.hooksPath /tmp; sleep 0.3; test -n "$(git -C $N config core.hooksPath)"'`,
		`try new-fsmonitor sh -c 'git -C $N config core.fsmonitor "touch /tmp/pwned"; sleep 0.3; test -n "$(git -C $N config core.fsmonitor)"'`,
		`try ok-new-commit sh -c 'cd $N && echo hi > f && git add f && git -c user.email=a@b -c user.name=agent commit -qm agent'`,
		// The home that a grant holds.
		`try bashrc sh -c 'echo "touch /tmp/pwned" >> $H/.bashrc'`,
		`try profile sh -c 'echo "touch /tmp/pwned" > $H/.profile'`,
		`try bash-profile sh -c 'echo "touch /tmp/pwned" > $H/.bash_profile'`,
		`try ssh sh -c 'echo ssh-ed25519 AAAA agent >> $H/.ssh/authorized_keys'`,
		`try gitconfig sh -c 'echo "[core]" >> $H/.gitconfig'`,
		`try config-git sh -c 'mkdir -p $H/.config/git && echo x > $H/.config/git/config'`,
		`try autostart sh -c 'mkdir -p $H/.config/autostart && echo x > $H/.config/autostart/a.desktop'`,
		`try user-unit sh -c 'mkdir -p $H/.config/systemd/user && echo x > $H/.config/systemd/user/a.service'`,
		`try zshrc-link sh -c 'echo "touch /tmp/pwned" >> $H/.zshrc'`,
		`try zshrc-link-replace sh -c 'rm -f $H/.zshrc && echo "touch /tmp/pwned" > $H/.zshrc'`,
		`try local-bin sh -c 'mkdir -p $H/.local/bin && printf "#!/bin/sh\n" > $H/.local/bin/git'`,
		`try ok-home touch $H/notes`,
		// Last: moving a protected path (or a parent) aside to make a new one.
		`try hooks-rename mv $R/.git/hooks $R/.git/hooks.old`,
		`try gitdir-rename mv $R/.git $R/.git.old`,
		`try repo-rename mv $R $R.old`,
		`try bashrc-rename mv $H/.bashrc $H/.bashrc.old`,
		`try ssh-rename mv $H/.ssh $H/.ssh.old`,
		`try dotconfig-rename mv $H/.config $H/.config.old`,
	}
	return strings.Join(lines, "\n")
}

// outcomes parses protectScript's output.
func outcomes(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestProtectedPaths: inside a granted repository and a granted home, an
// agent cannot plant what the host would run later (a git hook or a git
// configuration, in the repository it found or in one it made with git
// init; shell start-up files, ~/.ssh, ~/.gitconfig, autostart entries,
// user units), nor rename them away to make new ones; git still commits.
// --unprotect lets one path through, and the audit record names it.
func TestProtectedPaths(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		ws := e.bin + "/ws-protect-" + who
		home := e.bin + "/home-protect-" + who
		setup := fmt.Sprintf(`set -e; rm -rf %[1]s %[2]s; mkdir -p %[1]s %[2]s
git init -q %[1]s/repo
cp /etc/skel/.bashrc /etc/skel/.profile %[2]s/; mkdir %[2]s/dotfiles; echo "# zsh" > %[2]s/dotfiles/zshrc; ln -s dotfiles/zshrc %[2]s/.zshrc; mkdir -m 700 %[2]s/.ssh; : > %[2]s/.ssh/authorized_keys; : > %[2]s/.gitconfig
chown -R %[3]s %[1]s %[2]s`, ws, home, who)
		if r := e.exec(execOpts{}, "sh", "-c", setup); r.err != nil {
			t.Fatal(r)
		}
		// The home is one of a user's: the box's passwd names it.
		if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("userdel protect%[1]s 2>/dev/null; useradd -M -d %[2]s -u %[3]d protect%[1]s", who, home, 2000+len(who))); r.err != nil {
			t.Fatal(r)
		}
		t.Cleanup(func() { e.exec(execOpts{}, "userdel", "protect"+who) })
		before := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("cd %s && sha256sum .bashrc .profile .ssh/authorized_keys .gitconfig .zshrc", home)).stdout

		audit0 := e.bin + "/audit/protect0-" + who + ".jsonl"
		e.exec(execOpts{}, "rm", "-f", audit0)
		r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--rw", home, "--audit-json", audit0, "--", "sh", "-c", protectScript(ws, home))...)
		if r.err != nil {
			t.Fatalf("protect script: %s", r)
		}
		got := outcomes(r.stdout)
		var names []string
		for k := range got {
			names = append(names, k)
		}
		slices.Sort(names)
		if len(names) < 20 {
			t.Fatalf("protect script printed %d outcomes: %s", len(names), r)
		}
		for _, n := range names {
			want := "refused"
			if strings.HasPrefix(n, "ok-") {
				want = "written"
			}
			if got[n] != want {
				t.Errorf("%s: %s, want %s", n, got[n], want)
			}
		}
		t.Run("made during the run", func(t *testing.T) {
			// The repository made with git init inside the run: on the
			// host, its owner's checkout and status run nothing of it.
			e.exec(execOpts{}, "rm", "-f", "/tmp/pwned")
			owner := user
			c := e.exec(execOpts{user: owner}, "sh", "-c", "cd "+ws+"/new && git checkout -q -b other && git status --short && ls -A .git/hooks && git config core.hooksPath; git config core.fsmonitor; true")
			if strings.TrimSpace(c.stdout) != "" || c.err != nil {
				t.Errorf("the new repository on the host: %s", c)
			}
			if p := e.exec(execOpts{}, "ls", "/tmp/pwned"); p.err == nil {
				t.Errorf("the host's git ran what the sandbox planted in a repository it made")
			}
			if strings.Contains(r.stderr, "planted") {
				t.Errorf("something planted was left: %s", r.stderr)
			}
			var protected, refused bool
			for _, rec := range e.auditRecords(t, audit0) {
				d := fmt.Sprint(rec["detail"])
				protected = protected || rec["event"] == "protected" && strings.Contains(d, ws+"/new/.git")
				refused = refused || rec["event"] == "refused" && strings.Contains(d, ws+"/new/.git/config") && strings.Contains(d, "core.hookspath")
			}
			if !protected || !refused {
				t.Errorf("audit: protected record %v, refused record for core.hooksPath %v", protected, refused)
			}
		})
		// Nothing of it reached the host.
		if after := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("cd %s && sha256sum .bashrc .profile .ssh/authorized_keys .gitconfig .zshrc", home)).stdout; after != before {
			t.Errorf("home start-up files changed on the host:\n%s\nwas\n%s", after, before)
		}
		// .bash_profile did not exist: its placeholder is gone with the run.
		for _, p := range []string{ws + "/repo/.git/hooks/post-checkout", ws + "/repo/.git/config.worktree", home + "/.config/autostart/a.desktop", home + "/.config/systemd/user/a.service", home + "/.bash_profile", home + "/.local/bin"} {
			if c := e.exec(execOpts{}, "ls", p); c.err == nil {
				t.Errorf("%s was planted on the host", p)
			}
		}
		if c := e.exec(execOpts{}, "git", "-C", ws+"/repo", "config", "core.hooksPath"); c.err == nil {
			t.Errorf("core.hooksPath was set on the host: %s", c.stdout)
		}
		e.noLeftovers(t)

		// --unprotect: the hooks of that one repository become writable,
		// logged and audited; its configuration stays protected.
		audit := e.bin + "/audit/protect-" + who + ".jsonl"
		e.exec(execOpts{}, "rm", "-f", audit)
		r = e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--unprotect", ws+"/repo/.git/hooks", "--audit-json", audit, "--", "sh", "-c",
			`echo true > `+ws+`/repo/.git/hooks/post-commit && echo hook=written; git -C `+ws+`/repo config core.hooksPath /tmp && echo config=written || echo config=refused`)...)
		if !strings.Contains(r.stdout, "hook=written") || !strings.Contains(r.stdout, "config=refused") {
			t.Errorf("--unprotect %s/repo/.git/hooks: want the hook written and the config refused: %s", ws, r)
		}
		if !strings.Contains(r.stderr, "unprotected") {
			t.Errorf("--unprotect is not logged: %s", r)
		}
		found := false
		for _, rec := range e.auditRecords(t, audit) {
			if rec["event"] == "start" && fmt.Sprint(rec["unprotected"]) == fmt.Sprint([]any{ws + "/repo/.git/hooks"}) {
				found = true
			}
		}
		if !found {
			t.Errorf("audit start record does not name the unprotected path")
		}
		e.noLeftovers(t)
	})
}

// TestProtectedNewRepoRace: the agent makes many repositories and writes
// an executable post-checkout in each at once (no fork in between); none
// is left after the run.
func TestProtectedNewRepoRace(t *testing.T) {
	e := requireEnv(t)
	asEach(t, func(t *testing.T, user, who string, pre []string) {
		ws := e.bin + "/ws-race-" + who
		if r := e.exec(execOpts{}, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s && chown %[2]s %[1]s", ws, who)); r.err != nil {
			t.Fatal(r)
		}
		perl := `for my $i (1..200) { my $d = "r$i/.git"; mkdir "r$i"; mkdir $d; mkdir "$d/hooks";
  if (open(my $f, ">", "$d/hooks/post-checkout")) { print $f "#!/bin/sh\ntouch /tmp/pwned\n"; close $f; chmod 0755, "$d/hooks/post-checkout"; $w++ } }
print "written=$w\n";`
		r := e.sodactl(execOpts{user: user}, append(pre, "--rw", ws, "--", "sh", "-c", "cd "+ws+" && perl -e '"+perl+"'")...)
		if r.err != nil || !strings.Contains(r.stdout, "written=") {
			t.Fatalf("race: %s", r)
		}
		t.Logf("%s", strings.TrimSpace(r.stdout))
		if c := e.exec(execOpts{}, "sh", "-c", "ls "+ws+"/r*/.git/hooks/ | grep -v -e '^$' -e ':$'"); strings.TrimSpace(c.stdout) != "" {
			t.Errorf("hooks left after the run: %s", c.stdout)
		}
		e.noLeftovers(t)
	})
}
