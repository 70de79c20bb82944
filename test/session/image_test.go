package session

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/soda-project/soda/test/testkit"
)

// userlandLayer is a layer of the host's own bash, dash, GNU tar, find,
// the few tools a session's scripts run and python3 (with the part of its
// standard library that starting it and writing a file need), with the
// shared libraries ldd names, and an os-release of its own: the smallest
// image a session can use, made without a network.
func userlandLayer(t *testing.T) []byte {
	t.Helper()
	var paths []string
	for _, tool := range []string{"bash", "sh", "tar", "find", "chmod", "rm", "stat", "cat", "ls", "mkdir", "id", "wc", "true"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			testkit.SkipHostLacks(t, "%s for the test image: %v", tool, err)
		}
		paths = append(paths, p)
	}
	paths = append(paths, "/bin/sh") // what a session's exec runs, through /bin as the host has it
	// The system's python3 (not a version manager's shim first in PATH),
	// and where its standard library is.
	out, err := exec.Command("/usr/bin/python3", "-I", "-c", "import os; print(os.path.dirname(os.__file__))").Output()
	if err != nil {
		testkit.SkipHostLacks(t, "/usr/bin/python3 for the test image: %v", err)
	}
	lib := strings.TrimSpace(string(out))
	paths = append(paths, "/usr/bin/python3", lib+"/os.py", lib+"/encodings/__init__.py", lib+"/encodings/aliases.py", lib+"/encodings/utf_8.py")
	entries := append(testkit.HostFilesLayer(t, paths...),
		testkit.Entry{Name: "etc/", Mode: 0o755}, testkit.Entry{Name: "etc/os-release", Mode: 0o644, Data: []byte("ID=soda-session-image\n")})
	return testkit.Layer(t, entries)
}

// userlandImage serves userlandLayer's image as soda/userland:TAG on a
// registry of the test's and pulls it into a store of its own; it returns
// the reference and the store.
func userlandImage(t *testing.T, tag string) (ref, store string) {
	t.Helper()
	ref = testkit.Registry(t) + "/soda/userland:" + tag
	testkit.Push(t, ref, testkit.Image(t, userlandLayer(t)))
	store = filepath.Join(bin, "image-store-"+tag)
	testkit.Pull(t, filepath.Join(bin, "sodactl"), store, ref)
	return ref, store
}

// TestImageSession: sodactl sandbox mcp --direct --image: each session's
// system is the image, its workspace the quota's tmpfs as always: create
// with seeds, exec with the image's tools, diff, reset.
func TestImageSession(t *testing.T) {
	requireSandbox(t)
	ref, store := userlandImage(t, "1")
	cs, _ := server(t, "--image", ref, "--image-store", store)
	res, _ := must(t, cs, "sandbox_create", map[string]any{"files": []any{file("seed.txt", "seed\n")}})
	id := res.SandboxID
	out, _ := must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id,
		"command": "cat /etc/os-release; test -e /usr/lib/python3/dist-packages && echo host-python || echo image-python; cat seed.txt; " +
			"python3 -I -c 'import sys; open(\"added.txt\", \"w\").write(\"written by python %d.%d\\n\" % sys.version_info[:2])'; cat added.txt"})
	if out.Exec == nil || out.Exec.ExitCode != 0 || !strings.Contains(out.Exec.Stdout, "ID=soda-session-image") ||
		!strings.Contains(out.Exec.Stdout, "image-python") || !strings.Contains(out.Exec.Stdout, "seed") || !strings.Contains(out.Exec.Stdout, "written by python 3.") {
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

// TestBenchImageSession is make bench-images' third figure (SODA_BENCH=1):
// a session's warm sandbox_exec of true on an image (userlandLayer)
// against the same on the host's root, p50 of 100 each, three rounds
// alternated, in one run. Nothing is gated on a time.
func TestBenchImageSession(t *testing.T) {
	if os.Getenv("SODA_BENCH") != "1" {
		t.Skip(testkit.BenchmarkOnly + " make bench-images runs it (SODA_BENCH=1)")
	}
	requireSandbox(t)
	ref, store := userlandImage(t, "bench")
	hostCS, _ := server(t)
	imageCS, _ := server(t, "--image", ref, "--image-store", store)
	hostID, imageID := must1(t, hostCS), must1(t, imageCS)
	warm := func(cs *mcp.ClientSession, id string) []time.Duration {
		return testkit.TimeIt(100, func() {
			must(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "argv": []any{"true"}})
		})
	}
	var host, image []time.Duration
	for round := 0; round < 3; round++ {
		host = append(host, warm(hostCS, hostID)...)
		image = append(image, warm(imageCS, imageID)...)
	}
	h, im := testkit.Median(host), testkit.Median(image)
	line := fmt.Sprintf("| a session's warm `sandbox_exec` of `true`, p50 of 300 | %s | %s (host root) | %.2f | unchanged |",
		im.Round(time.Microsecond), h.Round(time.Microsecond), float64(im)/float64(h))
	t.Log(line)
	if p := os.Getenv("SODA_BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}
