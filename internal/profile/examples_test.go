package profile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedExamples: the example profiles the package ships
// (/usr/share/doc/soda/examples/sandbox) parse, list no one until an
// administrator says who, and, once a user is named, take a request
// that leaves everything to them.
func TestShippedExamples(t *testing.T) {
	files, _ := filepath.Glob("../../packaging/examples/sandbox/*.conf")
	if len(files) < 2 {
		t.Fatalf("example profiles: %v, want the closed one and the coding agent's", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".conf")
		p, err := Parse(f, name, data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(p.Users) != 0 || len(p.Groups) != 0 {
			t.Errorf("%s names users %v or groups %v: an example must list no one", f, p.Users, p.Groups)
		}
		enabled := strings.Replace(string(data), "#Users=alice", "Users=alice", 1)
		p, err = Parse(f, name, []byte(enabled))
		if err != nil || len(p.Users) != 1 {
			t.Errorf("%s with Users=alice: %v %v", f, p, err)
		}
		if !strings.Contains(string(data), "/etc/soda/sandbox/") {
			t.Errorf("%s does not say where to copy it", f)
		}
	}
}
