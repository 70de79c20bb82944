package protect

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestProtectPlan: the repositories of a grant (depth 0 to RepoDepth,
// not in node_modules) and the home it holds give read-only binds of
// what exists, every directory between the grant and them pinned first,
// missing hooks and ~/.ssh made; --unprotect drops a path and its
// children.
func TestProtectPlan(t *testing.T) {
	g := t.TempDir()
	for _, d := range []string{"repo/.git/hooks", "a/b/deep/.git", "a/b/c/toodeep/.git", "node_modules/x/.git", "home/.config"} {
		if err := os.MkdirAll(filepath.Join(g, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"repo/.git/config", "home/.bashrc", "wt/.git"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(g, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g, f), []byte("gitdir: ../repo/.git\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(g, "home")
	// A dotfile manager's link: the link is pinned, its target protected.
	if err := os.MkdirAll(filepath.Join(g, "dotfiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g, "dotfiles/zshrc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../dotfiles/zshrc", filepath.Join(home, ".zshrc")); err != nil {
		t.Fatal(err)
	}
	plan := Plan([]string{g}, []string{home}, "")
	var ro, pinned []string
	for i, p := range plan {
		rel := strings.TrimPrefix(p.Path, g+"/")
		if p.ReadOnly {
			ro = append(ro, rel)
		} else {
			pinned = append(pinned, rel)
		}
		for _, q := range plan[:i] {
			if strings.HasPrefix(q.Path, p.Path+"/") {
				t.Errorf("%s is bound after its child %s", p.Path, q.Path)
			}
		}
	}
	slices.Sort(ro)
	slices.Sort(pinned)
	wantRO := []string{"a/b/deep/.git/hooks", "dotfiles/zshrc", "home/.bashrc", "home/.config/autostart", "home/.config/git", "home/.config/systemd/user", "home/.ssh", "repo/.git/config", "repo/.git/hooks", "wt/.git"}
	wantPinned := []string{"a", "a/b", "a/b/deep", "a/b/deep/.git", "dotfiles", "home", "home/.config", "home/.config/systemd", "home/.zshrc", "repo", "repo/.git", "wt"}
	if !slices.Equal(ro, wantRO) {
		t.Errorf("read-only:\n got %v\nwant %v", ro, wantRO)
	}
	if !slices.Equal(pinned, wantPinned) {
		t.Errorf("pinned:\n got %v\nwant %v", pinned, wantPinned)
	}
	kept, skipped := Unprotect(plan, []string{filepath.Join(g, "repo/.git/hooks"), filepath.Join(g, "home")})
	slices.Sort(skipped)
	var wantSkipped []string
	for _, p := range []string{"home/.bashrc", "home/.config/autostart", "home/.config/git", "home/.config/systemd/user", "home/.ssh", "repo/.git/hooks"} {
		wantSkipped = append(wantSkipped, filepath.Join(g, p))
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("unprotected: %v", skipped)
	}
	for _, p := range kept {
		if strings.HasPrefix(p.Path, filepath.Join(g, "home")) || p.Path == filepath.Join(g, "repo/.git/hooks") {
			t.Errorf("%s kept although unprotected", p.Path)
		}
	}
}

// TestPlanProjectMCP: a project's MCP configuration, whose stdio servers
// the host's agents run, is read-only at the grant's top and in each
// repository below it; a missing one is left alone.
func TestPlanProjectMCP(t *testing.T) {
	g := t.TempDir()
	repo := filepath.Join(g, "sub", "repo")
	for _, d := range []string{filepath.Join(repo, ".git"), filepath.Join(repo, ".vscode")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(g, ".mcp.json"), filepath.Join(repo, ".vscode", "mcp.json"), filepath.Join(repo, "opencode.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plan := Plan([]string{g}, nil, "/")
	ro := map[string]bool{}
	for _, p := range plan {
		ro[p.Path] = p.ReadOnly
	}
	for _, want := range []string{filepath.Join(g, ".mcp.json"), filepath.Join(repo, ".vscode", "mcp.json"), filepath.Join(repo, "opencode.json")} {
		if !ro[want] {
			t.Errorf("%s not read-only in the plan: %+v", want, plan)
		}
	}
	if _, ok := ro[filepath.Join(g, "opencode.json")]; ok {
		t.Errorf("a missing file is in the plan: %+v", plan)
	}
}
