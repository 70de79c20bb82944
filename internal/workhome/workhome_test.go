package workhome

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestStateDir(t *testing.T) {
	tests := []struct {
		name string
		euid int
		env  map[string]string
		want string
	}{
		{"root", 0, map[string]string{"XDG_RUNTIME_DIR": "/run/user/0"}, "/run/soda/sandbox"},
		{"user with a runtime dir", 1000, map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "TMPDIR": "/var/tmp"}, "/run/user/1000/soda-sandbox-1000"},
		{"user with TMPDIR only", 1000, map[string]string{"TMPDIR": "/var/tmp"}, "/var/tmp/soda-sandbox-1000"},
		{"user with neither", 1001, nil, "/tmp/soda-sandbox-1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StateDir(tt.euid, func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Errorf("StateDir = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	base := t.TempDir()
	euid := os.Geteuid()
	mk := func(name string, f func(p string) error) string {
		p := filepath.Join(base, name)
		if err := f(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		euid    int
		wantErr string
	}{
		{"made", filepath.Join(base, "new", "state"), euid, ""},
		{"existing", mk("ok", func(p string) error { return os.Mkdir(p, 0o700) }), euid, ""},
		{"group-writable", mk("gw", func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o770)
		}), euid, "writable only by it"},
		{"a symlink to a directory", mk("link", func(p string) error { return os.Symlink(filepath.Join(base, "ok"), p) }), euid, "not a directory owned by"},
		{"a file", mk("file", func(p string) error { return os.WriteFile(p, nil, 0o600) }), euid, "create"},
		{"someone else's", filepath.Join(base, "ok"), euid + 4242, "owned by uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(tt.path, tt.euid)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Lstat(d.Path()); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("state dir %v, %v; want a 0700 directory", fi, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func newDir(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "state"), os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestNewRemove(t *testing.T) {
	d := newDir(t)
	h, err := d.New()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(h.Path())
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home %v, %v; want a 0700 directory", fi, err)
	}
	if _, err := os.Stat(h.Path() + ".lock"); err != nil {
		t.Errorf("no lock file: %v", err)
	}
	// What a sandbox leaves: an unreadable directory with files in it.
	deep := filepath.Join(h.Path(), "a", "b")
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o600)
	os.Chmod(filepath.Join(h.Path(), "a"), 0)
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if left := entries(t, d.Path()); len(left) != 0 {
		t.Errorf("left in the state dir: %v", left)
	}
}

// leftover makes what a killed run leaves: a home and its lock file, the
// lock free.
func leftover(t *testing.T, d *Dir, name string) string {
	t.Helper()
	home := filepath.Join(d.Path(), "home-"+name)
	if err := os.MkdirAll(filepath.Join(home, ".config"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(home+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestSweep: leftovers whose lock is free go; a live home (its lock held
// in this very process, as a daemon's sibling sandbox holds it) stays, and
// so does everything a symlink in the state dir points at.
func TestSweep(t *testing.T) {
	d := newDir(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := d.New()
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	os.WriteFile(filepath.Join(live.Path(), "work"), []byte("in use"), 0o600)
	stale := leftover(t, d, "stale")
	// A lock file that is a symlink: not opened, not followed.
	if err := os.Symlink(victim, filepath.Join(d.Path(), "home-planted.lock")); err != nil {
		t.Fatal(err)
	}
	// A free lock whose home is a symlink to a directory elsewhere: the
	// link goes, not what it points at.
	if err := os.WriteFile(filepath.Join(d.Path(), "home-linked.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(d.Path(), "home-linked")); err != nil {
		t.Fatal(err)
	}
	// A pending lock, fresh: its run is making its home right now.
	if err := os.WriteFile(filepath.Join(d.Path(), "home-young.pending"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(d.Path(), "home-young"), 0o700)
	// A pending lock an hour old and free: its run was killed.
	oldPending := filepath.Join(d.Path(), "home-old.pending")
	if err := os.WriteFile(oldPending, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(d.Path(), "home-old"), 0o700)
	hourAgo := time.Now().Add(-time.Hour)
	os.Chtimes(oldPending, hourAgo, hourAgo)

	if n := d.Sweep(quiet()); n != 3 {
		t.Errorf("Sweep removed %d homes, want 3 (stale, linked, old)", n)
	}
	if b, err := os.ReadFile(filepath.Join(live.Path(), "work")); err != nil || string(b) != "in use" {
		t.Errorf("the live home was swept: %q, %v", b, err)
	}
	for _, gone := range []string{stale, stale + ".lock", filepath.Join(d.Path(), "home-linked"), oldPending, filepath.Join(d.Path(), "home-old")} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
	for _, kept := range []string{filepath.Join(d.Path(), "home-young"), filepath.Join(d.Path(), "home-planted.lock")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s was swept: %v", kept, err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("a symlink's target was touched: %q, %v", b, err)
	}
}

// TestSweepHeldByAnotherProcess: a lock held by another process (flock(1)
// standing in for a running sodactl) keeps its home.
func TestSweepHeldByAnotherProcess(t *testing.T) {
	d := newDir(t)
	home := leftover(t, d, "other")
	f, err := os.Open(home + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A second open file description, as another process has: flock
	// locks conflict between them even within one process.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if n := d.Sweep(quiet()); n != 0 {
		t.Errorf("Sweep removed %d homes, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(home, ".config")); err != nil {
		t.Errorf("a held home was swept: %v", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if n := d.Sweep(quiet()); n != 1 {
		t.Errorf("once free: Sweep removed %d homes, want 1", n)
	}
}

// TestRemoveTreeNoFollow: a symlink the sandbox left in its home (to a
// directory, to a file, dangling) is removed, never followed: what it
// points at keeps its content and its permissions.
func TestRemoveTreeNoFollow(t *testing.T) {
	outside := t.TempDir()
	secretDir := filepath.Join(outside, "secret")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(secretDir, "key"), []byte("k"), 0o400)
	os.Chmod(secretDir, 0o500)
	defer os.Chmod(secretDir, 0o700)
	file := filepath.Join(outside, "file")
	os.WriteFile(file, []byte("f"), 0o400)

	tests := []struct {
		name   string
		plant  func(home string) error
		target string
	}{
		{"link to a directory", func(h string) error { return os.Symlink(secretDir, filepath.Join(h, "d")) }, secretDir},
		{"link to a file", func(h string) error { return os.Symlink(file, filepath.Join(h, "f")) }, file},
		{"nested link", func(h string) error {
			if err := os.MkdirAll(filepath.Join(h, "x", "y"), 0o700); err != nil {
				return err
			}
			return os.Symlink(secretDir, filepath.Join(h, "x", "y", "z"))
		}, secretDir},
		{"dangling link", func(h string) error { return os.Symlink(filepath.Join(outside, "nothing"), filepath.Join(h, "n")) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDir(t)
			h, err := d.New()
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.plant(h.Path()); err != nil {
				t.Fatal(err)
			}
			var before os.FileInfo
			if tt.target != "" {
				before, _ = os.Stat(tt.target)
			}
			if err := h.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(h.Path()); err == nil {
				t.Error("the home is still there")
			}
			if tt.target != "" {
				after, err := os.Stat(tt.target)
				if err != nil || after.Mode() != before.Mode() {
					t.Errorf("target %s: %v, %v; want it untouched (%v)", tt.target, after, err, before.Mode())
				}
			}
			if b, err := os.ReadFile(filepath.Join(secretDir, "key")); err != nil || string(b) != "k" {
				t.Errorf("the link's target lost its content: %q, %v", b, err)
			}
		})
	}
	if err := RemoveTree(filepath.Join(outside, "never-made")); err != nil {
		t.Errorf("RemoveTree of nothing: %v", err)
	}
}

// TestConcurrentNewSweep: runs that start together each sweep and make
// their home at once, as 20 sodactl runs from one service do, or a daemon
// starting many sandboxes: none fails, and none loses its home to
// another's sweep.
func TestConcurrentNewSweep(t *testing.T) {
	d := newDir(t)
	const runs, rounds = 8, 200
	var wg sync.WaitGroup
	errs := make(chan string, runs*rounds)
	for range runs {
		wg.Go(func() {
			for range rounds {
				d.Sweep(quiet())
				h, err := d.New()
				if err != nil {
					errs <- "New: " + err.Error()
					continue
				}
				if _, err := os.Stat(h.Path()); err != nil {
					errs <- "home swept while in use: " + err.Error()
				}
				if err := h.Remove(); err != nil {
					errs <- "Remove: " + err.Error()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 5 {
			t.Error(e)
		}
	}
	if n > 0 {
		t.Errorf("%d failures in %d runs", n, runs*rounds)
	}
	if left := entries(t, d.Path()); len(left) != 0 {
		t.Errorf("left in the state dir: %v", left)
	}
}

// TestLeftovers: what a clean-up left is named, a live home is not, and
// nothing is removed.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	live, err := d.New()
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	// A home whose sandbox was killed: its lock file stays, free.
	killed, err := d.New()
	if err != nil {
		t.Fatal(err)
	}
	killed.lock.Close()
	old := time.Now().Add(-2 * pendingAge)
	for _, c := range []struct {
		name string
		make func(p string) error
	}{
		{"home-orphan", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"home-young.pending", func(p string) error { return os.WriteFile(p, nil, 0o600) }},
		{"home-old.pending", func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Chtimes(p, old, old)
		}},
		{"stray", func(p string) error { return os.WriteFile(p, nil, 0o600) }},
	} {
		if err := c.make(filepath.Join(dir, c.name)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Leftovers(dir)
	if err != nil {
		t.Fatal(err)
	}
	kb := filepath.Base(killed.Path())
	want := []string{"home-old.pending", "home-orphan", kb, kb + lockSuffix, "stray"}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Leftovers = %q, want %q (not the live %s, nor the young pending lock)", got, want, filepath.Base(live.Path()))
	}
	if _, err := os.Stat(killed.Path()); err != nil {
		t.Errorf("Leftovers removed something: %v", err)
	}
	if got, err := Leftovers(filepath.Join(dir, "nonexistent")); err != nil || got != nil {
		t.Errorf("Leftovers of a missing directory = %q, %v; want none", got, err)
	}
}
