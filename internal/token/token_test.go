package token

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const good = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestValid(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{good, true},
		{strings.Repeat("f", Len), true},
		{"", false},
		{good[:Len-1], false},
		{good + "0", false},
		{strings.ToUpper(good), false},
		{good[:Len-1] + "g", false},
		{good[:Len-1] + " ", false},
		{good[:Len-1] + "\n", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.in); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestGenerate(t *testing.T) {
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !Valid(a) || !Valid(b) {
		t.Fatalf("Generate returned invalid tokens %q, %q", a, b)
	}
	if a == b {
		t.Fatalf("two calls to Generate returned the same token %q", a)
	}
}

func TestEqual(t *testing.T) {
	other := strings.Repeat("0", Len)
	tests := []struct {
		a, b string
		want bool
	}{
		{good, good, true},
		{good, other, false},
		{good, good[:Len-1], false},
		{good, "", false},
		{"", "", true},
		{good, strings.ToUpper(good), false},
	}
	for _, tt := range tests {
		if got := Equal(tt.a, tt.b); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRead(t *testing.T) {
	tests := []struct {
		name      string
		content   *string // nil: no file
		want      string
		malformed bool
		notExist  bool
	}{
		{name: "plain", content: ptr(good), want: good},
		{name: "trailing newline", content: ptr(good + "\n"), want: good},
		{name: "missing", notExist: true},
		{name: "empty", content: ptr(""), malformed: true},
		{name: "only newline", content: ptr("\n"), malformed: true},
		{name: "two newlines", content: ptr(good + "\n\n"), malformed: true},
		{name: "crlf", content: ptr(good + "\r\n"), malformed: true},
		{name: "leading space", content: ptr(" " + good), malformed: true},
		{name: "upper case", content: ptr(strings.ToUpper(good)), malformed: true},
		{name: "short", content: ptr(good[:32]), malformed: true},
		{name: "long", content: ptr(good + good), malformed: true},
		{name: "huge", content: ptr(strings.Repeat("a", 1<<20)), malformed: true},
		{name: "not hex", content: ptr(strings.Repeat("z", Len)), malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.token")
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Read(path)
			switch {
			case tt.notExist:
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Read: err = %v, want fs.ErrNotExist", err)
				}
				if _, statErr := os.Stat(path); !errors.Is(statErr, fs.ErrNotExist) {
					t.Fatalf("Read created %s", path)
				}
			case tt.malformed:
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Read: err = %v, want ErrMalformed", err)
				}
				msg := err.Error()
				for _, want := range []string{path, "delete"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not mention %q", msg, want)
					}
				}
				if len(msg) > 400 {
					t.Errorf("error message too long (%d bytes), content leaked? %q", len(msg), msg)
				}
			default:
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if got != tt.want {
					t.Fatalf("Read = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func TestReadDirectory(t *testing.T) {
	if _, err := Read(t.TempDir()); err == nil {
		t.Fatal("Read of a directory succeeded")
	}
}

func TestEnsure(t *testing.T) {
	tests := []struct {
		name      string
		sub       string  // path below the temp dir
		content   *string // existing content; nil: none
		want      string  // "" means: any new valid token
		malformed bool
	}{
		{name: "creates", sub: "x.token"},
		{name: "creates parent", sub: "mcp/x.token"},
		{name: "creates parents", sub: "a/b/x.token"},
		{name: "keeps existing", sub: "x.token", content: ptr(good), want: good},
		{name: "keeps existing with newline", sub: "x.token", content: ptr(good + "\n"), want: good},
		{name: "refuses malformed", sub: "x.token", content: ptr("secret\n"), malformed: true},
		{name: "refuses empty", sub: "x.token", content: ptr(""), malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, tt.sub)
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Ensure(path)
			if tt.malformed {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Ensure: err = %v, want ErrMalformed", err)
				}
				data, _ := os.ReadFile(path)
				if string(data) != *tt.content {
					t.Fatalf("Ensure changed a malformed file to %q", data)
				}
				return
			}
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if tt.want != "" && got != tt.want {
				t.Fatalf("Ensure = %q, want %q", got, tt.want)
			}
			if !Valid(got) {
				t.Fatalf("Ensure returned invalid token %q", got)
			}
			again, err := Read(path)
			if err != nil || again != got {
				t.Fatalf("Read after Ensure = %q, %v; want %q", again, err, got)
			}
			if tt.content != nil {
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != got+"\n" {
				t.Errorf("file holds %q, want token and newline", data)
			}
			assertMode(t, path, FileMode)
			if dir := filepath.Dir(path); dir != root {
				assertMode(t, dir, fs.ModeDir|DirMode)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries after Ensure, want 1 (temporary file left?)", len(entries))
			}
		})
	}
}

// TestEnsureUmask checks that the mode does not depend on the umask.
func TestEnsureUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "d", "x.token")
	if _, err := Ensure(path); err != nil {
		t.Fatal(err)
	}
	assertMode(t, path, FileMode)
	assertMode(t, filepath.Dir(path), fs.ModeDir|DirMode)
}

func TestEnsureIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.token")
	first, err := Ensure(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		got, err := Ensure(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != first {
			t.Fatalf("Ensure #%d = %q, want %q", i+2, got, first)
		}
	}
}

func TestEnsureConcurrent(t *testing.T) {
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "x.token")
		const n = 8
		var (
			wg   sync.WaitGroup
			toks [n]string
			errs [n]error
		)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				toks[i], errs[i] = Ensure(path)
			}(i)
		}
		close(start)
		wg.Wait()
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("round %d: Ensure #%d: %v", round, i, errs[i])
			}
			if toks[i] != toks[0] {
				t.Fatalf("round %d: Ensure #%d = %q, #0 = %q", round, i, toks[i], toks[0])
			}
		}
		onDisk, err := Read(path)
		if err != nil || onDisk != toks[0] {
			t.Fatalf("round %d: file holds %q (%v), callers got %q", round, onDisk, err, toks[0])
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Fatalf("round %d: %d directory entries, want 1", round, len(entries))
		}
	}
}

// TestCreateLoses checks the path where another process won the race.
func TestCreateLoses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.token")
	if err := os.WriteFile(path, []byte(good+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	created, err := create(path, strings.Repeat("1", Len))
	if err != nil || created {
		t.Fatalf("create over an existing file = %v, %v; want false, nil", created, err)
	}
	created, err = createExcl(path, strings.Repeat("1", Len))
	if err != nil || created {
		t.Fatalf("createExcl over an existing file = %v, %v; want false, nil", created, err)
	}
	if got, _ := Read(path); got != good {
		t.Fatalf("existing token replaced by %q", got)
	}
}

func TestCreateExcl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.token")
	created, err := createExcl(path, good)
	if err != nil || !created {
		t.Fatalf("createExcl = %v, %v", created, err)
	}
	if got, err := Read(path); err != nil || got != good {
		t.Fatalf("Read = %q, %v", got, err)
	}
	assertMode(t, path, FileMode)
}

func TestEnsureUnwritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("host lacks: an unprivileged uid for this test (it runs as root, and root ignores directory permissions)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	_, err := Ensure(filepath.Join(dir, "x.token"))
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Ensure in read-only dir: err = %v, want an error naming %s", err, dir)
	}
}

func assertMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModeDir | fs.ModePerm); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

func ptr(s string) *string { return &s }
