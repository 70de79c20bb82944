package mcpd

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/soda-project/soda/internal/child"
)

func TestReachable(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o755))
	must(os.Chmod(filepath.Dir(root), 0o755)) // t.TempDir's parent is 0700
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"open", 0o755}, {"private", 0o700}, {"group", 0o750}} {
		must(os.Mkdir(filepath.Join(root, d.path), 0o755))
		must(os.WriteFile(filepath.Join(root, d.path, "server.js"), nil, 0o644))
		must(os.Chmod(filepath.Join(root, d.path), d.mode))
	}
	must(os.WriteFile(filepath.Join(root, "open", "secret.js"), nil, 0o600))
	st, err := os.Stat(root)
	must(err)
	owner := statOwner(st)
	nobody := &child.Identity{Name: "nobody", UID: 65534, GID: 65534}
	member := &child.Identity{Name: "member", UID: 65534, GID: 65534, Groups: []uint32{owner[1]}}
	for _, tc := range []struct {
		name    string
		id      *child.Identity
		path    string
		wantErr string
	}{
		{"open path", nobody, "open/server.js", ""},
		{"0700 directory on the way", nobody, "private/server.js", "cannot search " + filepath.Join(root, "private")},
		{"file only its owner reads", nobody, "open/secret.js", "cannot read " + filepath.Join(root, "open", "secret.js")},
		{"group directory, not a member", nobody, "group/server.js", "cannot search"},
		{"group directory, a member", member, "group/server.js", ""},
		{"the owner", &child.Identity{Name: "owner", UID: owner[0], GID: owner[1]}, "private/server.js", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := reachable(tc.id, filepath.Join(root, tc.path))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("reachable(%s, %s) = %v, want %q", tc.id.Name, tc.path, err, tc.wantErr)
			}
		})
	}
}

func statOwner(fi os.FileInfo) [2]uint32 {
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint32{st.Uid, st.Gid}
}
