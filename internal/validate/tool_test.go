package validate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recordsSum is sha256 over NUL-terminated fields, the digests' format
// as soda-validated(8) documents it, written here again.
func recordsSum(fields ...string) string {
	h := sha256.New()
	for _, f := range fields {
		h.Write([]byte(f + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// makeTree is a small validator installation: a script, a library in a
// directory, an executable, a symbolic link.
func makeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tool")
	for p, c := range map[string]string{"check.sh": "exit 0\n", "lib/a.js": "module.exports = 1\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "check.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib/a.js", filepath.Join(root, "main.js")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "lib")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestToolDigest: the validator digest covers Command[0] and every
// ReadOnlyPaths tree (paths, modes, contents, link targets), recomputed
// here from the documented format; the verdict and its statement carry
// it; a file changed in the tree between calls fails the next call,
// naming it, while one only touched (same contents) does not; a new
// worker (a restart) has another digest.
func TestToolDigest(t *testing.T) {
	root := makeTree(t)
	k := fakeKind()
	k.ReadOnlyPaths = []string{root}
	w, err := NewWorker(k, &fakeBackend{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := os.ReadFile("/bin/true")
	treeSum := recordsSum(
		"d", "755", ".", "",
		"f", "755", "check.sh", hexSum("exit 0\n"),
		"d", "755", "lib", "",
		"f", "644", "lib/a.js", hexSum("module.exports = 1\n"),
		"l", "777", "main.js", "lib/a.js",
	)
	want := recordsSum("binary", "/bin/true", hexSum(string(bin)), "tree", root, treeSum)
	v, err := w.Validate(context.Background(), oneFile)
	if err != nil || v.Status != StatusValid {
		t.Fatalf("first call: %+v %v", v, err)
	}
	if v.Digests.Validator != want || v.Digests.ValidatorBinary != hexSum(string(bin)) || v.Digests.ValidatorTrees[root] != treeSum {
		t.Errorf("digests %+v, want validator %s, tree %s", v.Digests, want, treeSum)
	}
	found := 0
	for _, c := range v.Attestation.Predicate.Configuration {
		if c.Digest["sha256"] == want || c.Digest["sha256"] == treeSum && c.Name == root+"/" {
			found++
		}
	}
	if found != 2 {
		t.Errorf("the statement's configuration %+v lacks the tree or the validator digest", v.Attestation.Predicate.Configuration)
	}

	// Touched, same contents: still the same validator.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(root, "lib/a.js"), later, later); err != nil {
		t.Fatal(err)
	}
	if v, err := w.Validate(context.Background(), oneFile); err != nil || v.Status != StatusValid {
		t.Errorf("after a touch: %+v %v", v, err)
	}
	// Changed: the next call fails, naming the file.
	if err := os.WriteFile(filepath.Join(root, "lib/a.js"), []byte("module.exports = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err = w.Validate(context.Background(), oneFile)
	if err != nil || v.Status != StatusFailed || v.Completed || len(v.Diagnostics) == 0 || !strings.Contains(v.Diagnostics[0].Message, "lib/a.js changed") {
		t.Errorf("after a file of the tree changed: %+v %v", v, err)
	}
	// A restart digests what is there now.
	w2, err := NewWorker(k, &fakeBackend{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w2.tool.digest == want {
		t.Errorf("a restart after the change has the old digest")
	}
}

// TestToolChanges: each kind of change to a tree is caught by the stat
// walk and named.
func TestToolChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(root string) error
		want   string
	}{
		{"a file added", func(r string) error { return os.WriteFile(filepath.Join(r, "lib/b.js"), nil, 0o644) }, "lib/b.js added"},
		{"a file removed", func(r string) error { return os.Remove(filepath.Join(r, "lib/a.js")) }, "lib/a.js removed"},
		{"a mode changed", func(r string) error { return os.Chmod(filepath.Join(r, "check.sh"), 0o700) }, "check.sh changed"},
		{"a link retargeted", func(r string) error {
			os.Remove(filepath.Join(r, "main.js"))
			return os.Symlink("check.sh", filepath.Join(r, "main.js"))
		}, "main.js changed"},
		{"a file replaced by rename", func(r string) error {
			if err := os.WriteFile(filepath.Join(r, "new"), []byte("exit 1\n"), 0o755); err != nil {
				return err
			}
			return os.Rename(filepath.Join(r, "new"), filepath.Join(r, "check.sh"))
		}, "check.sh changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := makeTree(t)
			tl, err := newTool("/bin/true", []string{root})
			if err != nil {
				t.Fatal(err)
			}
			if err := tl.check(); err != nil {
				t.Fatalf("unchanged: %v", err)
			}
			if err := tc.change(root); err != nil {
				t.Fatal(err)
			}
			if err := tl.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check() = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestTreeBounds: a tree over the entry or byte bound is refused with a
// clear error.
func TestTreeBounds(t *testing.T) {
	root := makeTree(t)
	if _, err := hashTree(root, 5, 1<<20); err != nil {
		t.Errorf("a tree of 5 entries with a bound of 5: %v", err)
	}
	if _, err := hashTree(root, 4, 1<<20); err == nil || !strings.Contains(err.Error(), "more than 4 entries") || !strings.Contains(err.Error(), root) {
		t.Errorf("a tree of 5 entries with a bound of 4: %v", err)
	}
	if _, err := hashTree(root, 100, 10); err == nil || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("a tree of 26 bytes with a bound of 10: %v", err)
	}
	k := fakeKind()
	k.ReadOnlyPaths = []string{filepath.Join(root, "missing")}
	if _, err := NewWorker(k, &fakeBackend{}, nil, nil); err == nil || !strings.Contains(err.Error(), "ReadOnlyPaths=") {
		t.Errorf("a missing tree: %v", err)
	}
}
