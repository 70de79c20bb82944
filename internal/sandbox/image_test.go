package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUseImage(t *testing.T) {
	cfg := ImageConfig{Env: []string{"PATH=/opt/py/bin:/usr/bin", "HOME=/root", "LANGUAGE=eo", "NODE_OPTIONS=--require=/x"}, WorkingDir: "/app"}
	for _, tc := range []struct {
		name    string
		spec    Spec
		wantDir string
		path    string
	}{
		{"nothing named: the image's directory", Spec{}, "/app", "/opt/py/bin:/usr/bin"},
		{"a project wins", Spec{ReadWrite: []string{"/src"}}, "", "/opt/py/bin:/usr/bin"},
		{"a workspace wins", Spec{WorkspaceSize: 1 << 20}, "", "/opt/py/bin:/usr/bin"},
		{"a named directory wins", Spec{Dir: "/srv"}, "/srv", "/opt/py/bin:/usr/bin"},
		{"a caller's PATH wins", Spec{Path: "/bin"}, "/app", "/bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.Env = []string{"A=1"}
			s.UseImage("/var/lib/soda/images/rootfs/x", "img@sha256:1", cfg)
			if s.RootFS != "/var/lib/soda/images/rootfs/x" || s.Image != "img@sha256:1" {
				t.Errorf("root %q, image %q", s.RootFS, s.Image)
			}
			if s.Dir != tc.wantDir || s.Path != tc.path {
				t.Errorf("dir %q, path %q; want %q, %q", s.Dir, s.Path, tc.wantDir, tc.path)
			}
			// The image's variables first, the caller's after (they win);
			// HOME and PATH not as variables; the engine filters the rest.
			if want := []string{"LANGUAGE=eo", "NODE_OPTIONS=--require=/x", "A=1"}; !slices.Equal(s.Env, want) {
				t.Errorf("env %q, want %q", s.Env, want)
			}
			if kept, _ := FilterEnv(s.Env); slices.ContainsFunc(kept, func(kv string) bool { return strings.HasPrefix(kv, "NODE_OPTIONS=") }) {
				t.Error("the image's NODE_OPTIONS passed the filter")
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "",
		"/usr/bin:/bin":                 "/usr/bin:/bin",
		".:/usr/bin::bin:/usr/bin/../x": "/usr/bin:/usr/x",
		"/a/:/a":                        "/a",
		"/ok:/bad\nline":                "/ok",
	} {
		if got := cleanPath(in); got != want {
			t.Errorf("cleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageDir(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"app/sub", "tmp/x", "home/u", "var/tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("app", filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, want, err string
	}{
		{"/app/sub/", "/app/sub", ""},
		{"/", "/", ""},
		{"/app/../app", "/app", ""},
		{"/inside/sub", "/inside/sub", ""},
		{"app", "", "not an absolute path"},
		{"/tmp/x", "", "a /tmp of its own"},
		{"/home/u", "", "a /home of its own"},
		{"/var/tmp", "", "a /var/tmp of its own"},
		{"/etc/file", "", "not a directory of the image"},
		{"/nowhere", "", "not a directory of the image"},
		{"/escape", "", "not a directory of the image"},
		{"/../../etc", "/etc", ""}, // the image's /etc: / has no parent
	} {
		got, err := imageDir(root, tc.dir)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("imageDir(%q) = %q, %v; want %q", tc.dir, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("imageDir(%q) = %q, %v; want an error with %q", tc.dir, got, err, tc.err)
		}
	}
}
