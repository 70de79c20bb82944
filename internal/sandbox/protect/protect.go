// Package protect decides which paths inside a sandbox's read-write grants
// are protected because the host runs them: planted files must never run
// on the host. A read-write grant lets the agent write files that the
// user's own programs run later, outside the sandbox: a git hook runs at
// the user's next checkout, a git configuration can name a program
// (core.hooksPath, core.fsmonitor, core.sshCommand, a filter), a shell
// start-up file runs at the next login. Init makes those paths read-only
// in the sandbox's mount namespace before it confines itself:
//
//   - each protected path that exists is bound onto itself read-only
//     (open_tree and move_mount on a descriptor opened without following
//     any symlink, so that what is bound is what was checked);
//   - every directory between the grant and a protected path, the
//     protected directory's own parents included, is bound onto itself
//     (read-write: only its name is pinned). rename(2) and rmdir(2) refuse
//     to move or remove a mount point (EBUSY), so that the agent cannot
//     move ".git" or "~/.config" aside and make a fresh, writable one at
//     the same place;
//   - a protected directory that is missing is made first (empty, owned
//     by its parent's owner), so that it can be bound: an empty ~/.ssh or
//     .git/hooks changes nothing for the host.
//
// The mount namespace decides, Landlock does not: Landlock rules only add
// rights below a directory, they cannot take a subtree back out of a
// read-write grant.
//
// This package only plans (Plan, Unprotect) and finds (FindGitDirs,
// PasswdHomes); the init side (internal/sandboxinit) makes the mounts, the
// host side (internal/sandbox) watches what no mount can protect.
package protect

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// GitDirNames are the paths of a git directory that decide what git
// runs: hooks, and the configuration files git reads there.
var GitDirNames = []string{"hooks", "config", "config.worktree", "commondir"}

// gitDirsMade are the ones made when missing (directories).
var gitDirsMade = []string{"hooks"}

// HomePaths are the paths of a home directory that the user's
// programs run or obey without asking: shell start-up files (bash, sh,
// zsh, fish), X and desktop sessions (autostart entries run at login),
// systemd user units and the user manager's environment, ssh (keys that
// let someone in, a config whose ProxyCommand runs), git's global
// configuration, and the directories a stock ~/.profile puts first in
// PATH. See docs/sandbox.md for the reasoning.
var HomePaths = []string{
	".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout",
	".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout",
	".config/fish",
	".xprofile", ".xsession", ".xsessionrc", ".xinitrc", ".pam_environment",
	".config/autostart",
	".config/systemd/user", ".local/share/systemd/user", ".config/environment.d",
	".ssh",
	".gitconfig", ".config/git",
	".local/bin", "bin",
}

// HomeDirsMade are the ones made when missing (directories whose
// presence, empty, changes nothing).
var HomeDirsMade = []string{".ssh", ".config/autostart", ".config/systemd/user", ".config/git"}

// ProjectMCPPaths are a project's MCP configuration files, whose stdio
// servers the user's agents start on the host, unsandboxed (and sodactl
// run --mcp-config on the host too): protected, where they exist, at the
// top of each read-write grant and of each repository in it.
var ProjectMCPPaths = []string{".mcp.json", ".vscode/mcp.json", ".cursor/mcp.json", "opencode.json", "opencode.jsonc", ".codex/config.toml"}

// RepoDepth is how deep below a read-write grant init looks for git
// repositories (a repository's directory at depth 0 to RepoDepth).
const RepoDepth = 3

// RepoSkip are directories that the search does not enter (big, and not
// where repositories are kept).
var RepoSkip = []string{"node_modules", ".cache"}

// Protection is one mount init makes to protect a path.
type Protection struct {
	Path     string
	ReadOnly bool // read-only bind; false: pinned (bound onto itself)
}

// Plan lists the mounts that protect the repositories of the
// read-write grants rw and the homes they hold, parents before children.
// A protected path that is a symbolic link is pinned (a mount on it keeps
// it from being removed or replaced) and its target protected when a
// grant holds it (elsewhere the sandbox cannot write it).
func Plan(rw, homes []string, hostRoot string) []Protection {
	type target struct{ grant, path string }
	var targets []target
	for _, g := range rw {
		gitDirs, gitFiles := FindGitDirs(g)
		for _, f := range gitFiles {
			targets = append(targets, target{g, f})
		}
		// The projects' MCP configuration: at the grant's top and at
		// each repository's (the directory holding .git).
		tops := []string{g}
		for _, gd := range gitDirs {
			if filepath.Base(gd) == ".git" && filepath.Dir(gd) != g && strings.HasPrefix(filepath.Dir(gd), g+"/") {
				tops = append(tops, filepath.Dir(gd))
			}
		}
		for _, top := range tops {
			for _, rel := range ProjectMCPPaths {
				targets = append(targets, target{g, filepath.Join(top, rel)})
			}
		}
		for _, gitDir := range gitDirs {
			for _, d := range gitDirsMade {
				EnsureDir(hostRoot, filepath.Join(gitDir, d), 0o755)
			}
			for _, name := range GitDirNames {
				targets = append(targets, target{g, filepath.Join(gitDir, name)})
			}
		}
		for _, h := range homes {
			if h != g && !strings.HasPrefix(h, g+"/") && !strings.HasPrefix(g, h+"/") {
				continue
			}
			for _, rel := range HomePaths {
				p := filepath.Join(h, rel)
				if !strings.HasPrefix(p, g+"/") {
					continue // outside the grant, or the grant itself (asked for)
				}
				if slices.Contains(HomeDirsMade, rel) {
					mode := os.FileMode(0o755)
					if rel == ".ssh" {
						mode = 0o700
					}
					EnsureDir(hostRoot, p, mode)
				}
				targets = append(targets, target{g, p})
			}
		}
	}
	ro := map[string]bool{}
	var order []string
	add := func(p string, readOnly bool) {
		if _, ok := ro[p]; !ok {
			order = append(order, p)
		}
		ro[p] = ro[p] || readOnly
	}
	// Pin every directory from below the grant down to p's parent, then p.
	protect := func(g, p string, readOnly bool) {
		rel, _ := filepath.Rel(g, filepath.Dir(p))
		if rel != "." {
			dir := g
			for _, c := range strings.Split(rel, "/") {
				dir = filepath.Join(dir, c)
				add(dir, false)
			}
		}
		add(p, readOnly)
	}
	for _, t := range targets {
		fi, err := os.Lstat(t.path)
		if err != nil {
			continue // missing: see docs/sandbox.md
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			protect(t.grant, t.path, true)
			continue
		}
		protect(t.grant, t.path, false)
		if r, err := filepath.EvalSymlinks(t.path); err == nil {
			if i := slices.IndexFunc(rw, func(g string) bool { return r == g || strings.HasPrefix(r, g+"/") }); i >= 0 && r != rw[i] {
				protect(rw[i], r, true)
			}
		}
	}
	plan := make([]Protection, len(order))
	for i, p := range order {
		plan[i] = Protection{p, ro[p]}
	}
	// Parents first: a bind onto a parent would cover the child's.
	slices.SortStableFunc(plan, func(a, b Protection) int {
		return strings.Count(a.Path, "/") - strings.Count(b.Path, "/")
	})
	return plan
}

// FindGitDirs returns the git directories of the repositories at depth 0
// to RepoDepth below g: each ".git" directory, and for a ".git" file
// ("gitdir: PATH", a linked worktree or a submodule) the file itself
// (redirecting it redirects everything) and, when they are inside g, the
// directory it names and that directory's common directory. Symlinks are
// not followed.
func FindGitDirs(g string) (dirs, files []string) {
	var out []string
	_ = filepath.WalkDir(g, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		depth := 0
		if p != g {
			depth = strings.Count(strings.TrimPrefix(p, g), "/")
		}
		if d.Name() == ".git" && p != g {
			if d.IsDir() {
				out = append(out, p)
				out = append(out, submoduleGitDirs(p)...)
				return fs.SkipDir
			}
			if d.Type().IsRegular() {
				files = append(files, p)
				if target := gitFileTarget(p); target != "" && strings.HasPrefix(target, g+"/") {
					out = append(out, target)
					if common := commonDir(target); common != "" && strings.HasPrefix(common, g+"/") {
						out = append(out, common)
					}
				}
			}
			return nil
		}
		if d.IsDir() && (depth > RepoDepth || slices.Contains(RepoSkip, d.Name())) {
			return fs.SkipDir
		}
		return nil
	})
	if filepath.Base(g) == ".git" {
		out = append(out, g)
	}
	for _, p := range out {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() && !slices.Contains(dirs, p) {
			dirs = append(dirs, p)
		}
	}
	return dirs, files
}

// submoduleGitDirs are the git directories of the submodules that
// gitDir holds (modules/NAME, nested).
func submoduleGitDirs(gitDir string) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(gitDir, "modules"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(p, "HEAD")); err == nil {
			out = append(out, p)
			if fi, err := os.Lstat(filepath.Join(p, "modules")); err != nil || !fi.IsDir() {
				return fs.SkipDir
			}
		}
		switch d.Name() {
		case "objects", "refs", "logs", "hooks", "info":
			return fs.SkipDir
		}
		return nil
	})
	return out
}

// gitFileTarget is the directory a ".git" file names, or "".
func gitFileTarget(p string) string {
	b, err := os.ReadFile(p)
	if err != nil || len(b) > 4096 {
		return ""
	}
	t, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return ""
	}
	t = strings.TrimSpace(t)
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(p), t)
	}
	return filepath.Clean(t)
}

// commonDir is the directory a git directory's commondir file names, or "".
func commonDir(gitDir string) string {
	b, err := os.ReadFile(filepath.Join(gitDir, "commondir"))
	if err != nil || len(b) > 4096 {
		return ""
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return ""
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(gitDir, t)
	}
	return filepath.Clean(t)
}

// PasswdHomes are the home directories /etc/passwd names ("/" and
// relative ones left out: "/" would make every grant a home).
func PasswdHomes(r io.Reader) []string {
	var homes []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 {
			continue
		}
		h := filepath.Clean(fields[5])
		if h == "/" || !filepath.IsAbs(fields[5]) || slices.Contains(homes, h) {
			continue
		}
		homes = append(homes, h)
	}
	return homes
}

// Unprotect drops what the caller unprotected: a path equal to or below
// one of paths. It returns the rest and the read-only protections left out.
func Unprotect(plan []Protection, paths []string) (kept []Protection, skipped []string) {
	for _, p := range plan {
		if slices.ContainsFunc(paths, func(u string) bool { return p.Path == u || strings.HasPrefix(p.Path, u+"/") }) {
			if p.ReadOnly {
				skipped = append(skipped, p.Path)
			}
			continue
		}
		kept = append(kept, p)
	}
	return kept, skipped
}
