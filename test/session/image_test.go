package session

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/soda-project/soda/test/testkit"
)

// userlandLayer is a layer of the host's own bash, dash, GNU tar, find
// and the few tools a session's scripts run, with the shared libraries
// ldd names, below usr/ (bin, lib and lib64 link there, as on a merged-/usr
// system), and an os-release of its own: the smallest image a session
// can use, made without a network.
func userlandLayer(t *testing.T) []byte {
	t.Helper()
	tools := []string{"bash", "sh", "tar", "find", "chmod", "rm", "stat", "cat", "ls", "mkdir", "id", "wc"}
	files := map[string]bool{}
	lddLine := regexp.MustCompile(`(/[^ ]+) \(0x`)
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("host lacks: %s for the test image: %v", tool, err)
		}
		files[p] = true // sh -> dash: the link too
		p, _ = filepath.EvalSymlinks(p)
		files[p] = true
		out, _ := exec.Command("ldd", p).Output()
		for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
			lib, _ := filepath.EvalSymlinks(m[1])
			files[lib] = true
			files[m[1]] = true
		}
	}
	var names []string
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mkdirs := func(p string) {
		var parts []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, d := range parts {
			if !dirs[d] {
				dirs[d] = true
				_ = tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir})
			}
		}
	}
	// The host's own paths, under usr/ where it merges them.
	under := func(p string) string {
		for _, top := range []string{"/bin/", "/lib/", "/lib64/", "/sbin/"} {
			if strings.HasPrefix(p, top) {
				return "/usr" + p
			}
		}
		return p
	}
	for _, f := range names {
		dst := under(f)
		if dirs[dst] {
			continue
		}
		fi, err := os.Lstat(f)
		if err != nil {
			continue
		}
		mkdirs(dst)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(f)
			_ = tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dst, "/"), Linkname: target, Typeflag: tar.TypeSymlink, Mode: 0o777})
			dirs[dst] = true
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_ = tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dst, "/"), Mode: int64(fi.Mode().Perm()), Size: int64(len(data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(data)
		dirs[dst] = true
	}
	for _, l := range []struct{ name, target string }{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}, {"sbin", "usr/sbin"}} {
		_ = tw.WriteHeader(&tar.Header{Name: l.name, Linkname: l.target, Typeflag: tar.TypeSymlink, Mode: 0o777})
	}
	mkdirs("/etc/x")
	release := []byte("ID=soda-session-image\n")
	_ = tw.WriteHeader(&tar.Header{Name: "etc/os-release", Mode: 0o644, Size: int64(len(release)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(release)
	_ = tw.Close()
	return buf.Bytes()
}

// TestImageSession: sodactl sandbox mcp --direct --image: each session's
// system is the image, its workspace the quota's tmpfs as always: create
// with seeds, exec with the image's tools, diff, reset.
func TestImageSession(t *testing.T) {
	requireSandbox(t)
	ref := testkit.Registry(t) + "/soda/userland:1"
	testkit.Push(t, ref, testkit.Image(t, userlandLayer(t)))
	store := filepath.Join(bin, "image-store")
	if out, err := exec.Command(filepath.Join(bin, "sodactl"), "image", "pull", "--store", store, ref).CombinedOutput(); err != nil {
		t.Fatalf("sodactl image pull: %v\n%s", err, out)
	}
	cs, _ := server(t, "--image", ref, "--image-store", store)
	res, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("seed.txt", "seed\n")}})
	id := res.SandboxID
	out, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id,
		"command": "cat /etc/os-release; test -e /usr/bin/python3 && echo host-python || echo no-python; cat seed.txt; echo new > added.txt"})
	if out.Exec == nil || out.Exec.ExitCode != 0 || !strings.Contains(out.Exec.Stdout, "ID=soda-session-image") ||
		!strings.Contains(out.Exec.Stdout, "no-python") || !strings.Contains(out.Exec.Stdout, "seed") {
		t.Fatalf("exec in the image: %+v", out.Exec)
	}
	d, _ := must(t, cs, "sandbox_diff", map[string]any{"sandbox_id": id})
	if d.Diff == nil || len(d.Diff.Changes) != 1 || d.Diff.Changes[0].Path != "added.txt" || d.Diff.Changes[0].Kind != "added" {
		t.Fatalf("diff: %+v", d.Diff)
	}
	must(t, cs, "sandbox_reset", map[string]any{"sandbox_id": id})
	back, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "ls"})
	if back.Exec == nil || strings.TrimSpace(back.Exec.Stdout) != "seed.txt" {
		t.Fatalf("after reset: %+v", back.Exec)
	}
}
