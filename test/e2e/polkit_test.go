package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPolkit drives internal/polkit against the real polkitd and D-Bus of a
// systemd box: the shipped D-Bus policy and polkit actions are installed,
// test/polkitcheck owns sodad's bus name as root and asks polkit about each
// caller by its bus name, as sodad will. An unprivileged caller without a
// session is refused the create action (allow_any=auth_admin) with a
// challenge, allowed once the shipped example rules put it in group
// soda-users; the auth_admin beyond-profile action stays refused until a
// rule grants it to that user; root is allowed everything. An owner's
// exec, kill and read-audit are allowed by default and a rule can forbid
// one of them alone; manage-other implies the four -other actions.
func TestPolkit(t *testing.T) {
	if os.Getenv("SODA_E2E") != "1" {
		t.Skip("the polkit test runs with SODA_E2E=1 (make test-e2e): it boots a systemd box")
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root and test/box/sdbox check: not running as root (uid %d)", os.Geteuid())
	}
	repo := repoRoot(t)
	sdbox := filepath.Join(repo, "test", "box", "sdbox")
	if out, err := exec.Command(sdbox, "check").CombinedOutput(); err != nil {
		t.Skipf("needs test/box/sdbox check: %s", strings.TrimSpace(string(out)))
	}

	// ---- what goes into the box: the fixture and the shipped files.
	art := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(art, "polkitcheck"), "./test/polkitcheck")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/polkitcheck: %v\n%s", err, out)
	}
	for _, f := range []string{"polkit/io.github.soda_project.soda1.policy", "polkit/50-soda-example.rules", "packaging/dbus/io.github.soda_project.Soda1.conf"} {
		copyFile(t, filepath.Join(repo, f), filepath.Join(art, filepath.Base(f)))
	}

	b := bootBox(t, sdbox, "--bind-ro", art, "--timeout", "60")
	b.onFailJournal(t)

	// ---- install the actions and the bus policy; an unprivileged user.
	must(t, b.sh(fmt.Sprintf(`set -e
install -m 0644 %[1]s/io.github.soda_project.soda1.policy /usr/share/polkit-1/actions/
install -m 0644 %[1]s/io.github.soda_project.Soda1.conf /usr/share/dbus-1/system.d/
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig
systemctl restart polkit.service
groupadd -r soda-users
groupadd -r soda-admins
useradd -M -U -s /bin/sh alice`, art)))
	t.Logf("polkit in the box: %s", strings.TrimSpace(b.run("sh", "-c", "pkaction --version; systemctl is-active polkit").stdout))
	if out := must(t, b.run("pkaction", "--action-id", "io.github.soda_project.soda1.beyond-profile", "--verbose")); !strings.Contains(out, "implicit any:      auth_admin") {
		t.Fatalf("pkaction does not show the shipped defaults:\n%s", out)
	}

	srv := b.start(t, nil, filepath.Join(art, "polkitcheck"))
	if l := srv.next(t, 15*time.Second, "polkitcheck start"); l != "ready io.github.soda_project.Soda1" {
		t.Fatalf("polkitcheck: %q; stderr:\n%s", l, srv.stderr.String())
	}

	// check asks, as user (empty: root), whether the caller may do action.
	check := func(user, action string) (authorized, challenge bool) {
		t.Helper()
		args := []string{"busctl", "call", "io.github.soda_project.Soda1", "/io/github/soda_project/Soda1",
			"io.github.soda_project.Soda1.Test", "Check", "sb", action, "false"}
		if user != "" {
			args = append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"}, args...)
		}
		out := strings.TrimSpace(must(t, b.run(args...)))
		switch out {
		case "bb true false":
			return true, false
		case "bb false true":
			return false, true
		case "bb false false":
			return false, false
		}
		t.Fatalf("Check %s as %q: unexpected answer %q", action, user, out)
		return
	}
	// eventually retries check until it answers want (polkitd reloads
	// rules.d on an inotify event, a moment after the file is written).
	eventually := func(user, action string, want bool) {
		t.Helper()
		// polkitd rereads rules.d on inotify; on a loaded machine (other
		// boxes booting) that took over 10 s once.
		deadline := time.Now().Add(30 * time.Second)
		for {
			if got, _ := check(user, action); got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s as %q: still %v after 30 s, want %v (polkitd did not pick the rules up)", action, user, !want, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	const (
		prefix = "io.github.soda_project.soda1."
		create = prefix + "create"
		beyond = prefix + "beyond-profile"
		other  = prefix + "manage-other"
	)
	// The -other actions: manage-other implies each of them.
	others := []string{prefix + "exec-other", prefix + "kill-other", prefix + "grant-other", prefix + "read-audit-other"}
	// An owner's own operations: allowed in any session by default.
	owners := []string{prefix + "exec", prefix + "kill", prefix + "read-audit"}

	// 1. Defaults: alice has no logind session here (allow_any applies).
	for _, a := range append([]string{create, beyond, other}, others...) {
		if ok, ch := check("alice", a); ok || !ch {
			t.Errorf("default %s for alice: authorized=%v challenge=%v, want refused with a challenge (auth_admin)", a, ok, ch)
		}
	}
	for _, a := range owners {
		if ok, _ := check("alice", a); !ok {
			t.Errorf("default %s for alice: refused, want allowed (an owner's operation, allow_any=yes)", a)
		}
	}
	// Root is authorized for everything (polkit's own rule for uid 0).
	for _, a := range append(append([]string{create, beyond, other}, others...), owners...) {
		if ok, _ := check("", a); !ok {
			t.Errorf("%s for root: refused", a)
		}
	}

	// 2. The shipped example rules: soda-users may create from any session;
	// beyond the profile still asks for an administrator.
	must(t, b.sh(fmt.Sprintf("install -m 0644 %s/50-soda-example.rules /etc/polkit-1/rules.d/50-soda.rules && usermod -aG soda-users alice", art)))
	eventually("alice", create, true)
	if ok, ch := check("alice", beyond); ok || !ch {
		t.Errorf("beyond-profile for alice in soda-users: authorized=%v challenge=%v, want still auth_admin", ok, ch)
	}

	// 3. A rule granting the auth_admin action to alice (the detail
	// "profile" sodad passes reaches the rule).
	b.write(t, "/etc/polkit-1/rules.d/40-test.rules", `polkit.addRule(function(action, subject) {
    if (action.id == "`+beyond+`" && subject.user == "alice" && action.lookup("profile") == "dev")
        return polkit.Result.YES;
});
`, "0644")
	eventually("alice", beyond, true)
	// Still not another user's sandbox.
	if ok, _ := check("alice", other); ok {
		t.Errorf("manage-other for alice: authorized without a rule")
	}

	// 4. Policy per operation: a rule forbids alice's exec in her own
	// sandboxes and nothing else of hers; a rule granting manage-other
	// grants every -other action by implication.
	b.write(t, "/etc/polkit-1/rules.d/30-test.rules", `polkit.addRule(function(action, subject) {
    if (action.id == "`+prefix+`exec" && subject.user == "alice")
        return polkit.Result.NO;
    if (action.id == "`+other+`" && subject.user == "alice")
        return polkit.Result.YES;
});
`, "0644")
	eventually("alice", prefix+"exec", false)
	for _, a := range append([]string{prefix + "kill", prefix + "read-audit", other}, others...) {
		if ok, _ := check("alice", a); !ok {
			t.Errorf("%s for alice with exec forbidden and manage-other granted: refused", a)
		}
	}
	srv.finish(t, 10*time.Second)
	log := srv.stderr.String()
	if !strings.Contains(log, "authorized=true") || !strings.Contains(log, "challenge=true") {
		t.Errorf("polkitcheck's log lacks the answers:\n%s", log)
	}
	// The shipped bus policy: only root may own sodad's name.
	r := b.run("setpriv", "--reuid=alice", "--regid=alice", "--init-groups", filepath.Join(art, "polkitcheck"))
	if r.err == nil || !strings.Contains(r.stderr, "AccessDenied") && !strings.Contains(r.stderr, "not allowed to own") {
		t.Errorf("alice owning io.github.soda_project.Soda1: want the bus policy's refusal:\n%s", r)
	}
	t.Logf("the checks as polkitcheck saw them (took= is one CheckAuthorization round trip):\n%s", log)
}
