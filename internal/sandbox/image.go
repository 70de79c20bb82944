package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ImageConfig is what a sandbox takes of an image's configuration (the
// OCI config's Env and WorkingDir).
type ImageConfig struct {
	// Env is the image's environment, KEY=VALUE: its PATH becomes
	// Spec.Path, its HOME is left out (the sandbox's home is its own),
	// the rest comes before the caller's Spec.Env and is filtered like it.
	Env []string
	// WorkingDir is the image's working directory, taken when the spec
	// names none and grants no read-write path or workspace: a project
	// is where an agent works.
	WorkingDir string
}

// UseImage makes the unpacked image at root (absolute, free of symbolic
// links) the sandbox's system (RootFS), named name in the audit trail,
// with the image's environment, PATH and working directory as
// ImageConfig says. The image's User is not taken: the sandbox runs as
// its caller's user, mapped, whose uid the grants' ownership and the
// sandbox's home depend on; an image that wants root would get
// capabilities in the sandbox's user namespace.
func (s *Spec) UseImage(root, name string, c ImageConfig) {
	s.RootFS, s.Image = root, name
	var env []string
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			if s.Path == "" {
				s.Path = v
			}
		case "HOME":
		default:
			env = append(env, kv)
		}
	}
	s.Env = append(env, s.Env...)
	if s.Dir == "" && len(s.ReadWrite) == 0 && s.WorkspaceSize == 0 && c.WorkingDir != "" {
		s.Dir = c.WorkingDir
	}
}

// imageOwnTop are the top-level directories that a sandbox on an image
// shows with contents of its own, not the image's (sandboxinit's
// populateTop and hiddenTop).
var imageOwnTop = []string{"proc", "sys", "dev", "tmp", "run", "home", "root", "mnt", "media"}

// imageDir checks that dir, a path as the sandbox sees it, is a directory
// of the image at rootFS that the sandbox shows as the image's, and
// returns it cleaned.
func imageDir(rootFS, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s: not an absolute path", dir)
	}
	d := filepath.Clean(dir)
	if d == "/" {
		return d, nil
	}
	top, _, _ := strings.Cut(d[1:], "/")
	own := ""
	switch {
	case slices.Contains(imageOwnTop, top):
		own = "/" + top
	case d == "/var/tmp" || strings.HasPrefix(d, "/var/tmp/"):
		own = "/var/tmp"
	}
	if own != "" {
		return "", fmt.Errorf("%s: the sandbox has a %s of its own, not the image's", d, own)
	}
	r, err := os.OpenRoot(rootFS)
	if err != nil {
		return "", fmt.Errorf("%s: %w", d, err)
	}
	defer r.Close()
	fi, err := r.Stat(d[1:])
	switch {
	case err != nil:
		return "", fmt.Errorf("%s is not a directory of the image: %w", d, err)
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory of the image", d)
	}
	return d, nil
}
