package hostkeys

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/llmgateway"
)

func TestReadCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", "  sk-123\n", 0o600)
	readable := write("readable", "sk-123", 0o644)
	twoLines := write("lines", "a\nb\n", 0o600)
	empty := write("empty", "\n", 0o600)
	big := write("big", strings.Repeat("x", MaxCredentialBytes+1), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		rootOnly bool
		want     string
		err      string
	}{
		{path: ok, want: "sk-123"},
		{path: readable, want: "sk-123"},
		{path: readable, rootOnly: true, err: "no one else may read"},
		{path: twoLines, err: "line break"},
		{path: empty, err: "empty"},
		{path: big, err: "not a credential"},
		{path: link, err: "symbolic link"},
		{path: dir, err: "not a regular file"},
		{path: filepath.Join(dir, "nope"), err: "no such file"},
	} {
		got, err := ReadCredential(tc.path, tc.rootOnly)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s rootOnly=%v: %q %v, want error %q", filepath.Base(tc.path), tc.rootOnly, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", filepath.Base(tc.path), got, err, tc.want)
		}
	}
	if os.Geteuid() == 0 {
		if got, err := ReadCredential(ok, true); err != nil || got != "sk-123" {
			t.Errorf("root's 0600 file, rootOnly: %q %v", got, err)
		}
	}
}

func TestAgentArgs(t *testing.T) {
	openai, _ := llmgateway.Lookup("openai")
	anthropic, _ := llmgateway.Lookup("anthropic")
	for _, tc := range []struct {
		routes []llmgateway.Route
		argv   string
		want   string
	}{
		{[]llmgateway.Route{{Provider: openai}}, "/opt/bin/codex exec hi", `/opt/bin/codex -c openai_base_url="http://127.0.0.1:9/openai/v1" exec hi`},
		{[]llmgateway.Route{{Provider: anthropic}}, "codex exec hi", "codex exec hi"},
		{[]llmgateway.Route{{Provider: openai}}, "claude -p hi", "claude -p hi"},
		{[]llmgateway.Route{{Provider: openai}}, "", ""},
	} {
		k := &Keys{cfg: Config{LLM: tc.routes}}
		if got := strings.Join(k.agentArgs(strings.Fields(tc.argv), "127.0.0.1:9"), " "); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.argv, got, tc.want)
		}
	}
}
