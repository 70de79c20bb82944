package doccheck

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// TestArchitectureCoversEveryPackage: docs/architecture.md names every
// package of the module (go list ./...) by its directory, in backquotes,
// and gives every binary of cmd/ a row of its parts table.
func TestArchitectureCoversEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.String())
	}
	const module = "github.com/soda-project/soda/"
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... listed %d packages: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		dir, ok := strings.CutPrefix(p, module)
		if !ok {
			t.Errorf("package %s is outside the module %s", p, module)
			continue
		}
		if !bytes.Contains(doc, []byte("`"+dir+"`")) {
			t.Errorf("docs/architecture.md does not name the package `%s`", dir)
		}
		if bin, ok := strings.CutPrefix(dir, "cmd/"); ok && path.Dir(dir) == "cmd" {
			if !bytes.Contains(doc, []byte("\n| `"+bin+"` |")) {
				t.Errorf("docs/architecture.md has no row | `%s` | for the binary", bin)
			}
		}
	}
}
