// Package imagestest runs sandboxes on OCI images for real on this host:
// an image the test builds (a static program and an os-release), served
// by go-containerregistry's registry on loopback, pulled by sodactl image
// pull and run by sodactl run --image, as root and as the user nobody.
package imagestest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/soda-project/soda/test/testkit"
)

// treeSum is a digest of every path, mode and content below dir.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		io.WriteString(h, rel+" "+info.Mode().String()+"\n")
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestRunImage(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.SkipHostLacks(t, "root: sodactl run's sandbox on this host needs it here (CI runs as root)")
	}
	testkit.RequireSandbox(t)
	bin, err := testkit.BuildBinaries("soda-images-", "sodactl", "soda-sandbox-init")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	repo := testkit.Registry(t) + "/soda/probe"
	digest := testkit.Push(t, repo+":1", testkit.ProbeImage(t, "ID=soda-image-test\n"))
	store := filepath.Join(bin, "store")
	sodactl := func(args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(bin, "sodactl"), args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	out, errOut, code := sodactl("image", "pull", "--store", store, repo+":1")
	if code != 0 || !strings.Contains(out, digest) {
		t.Fatalf("sodactl image pull: exit %d\n%s\n%s", code, out, errOut)
	}
	rootfs := filepath.Join(store, "rootfs", strings.TrimPrefix(digest, "sha256:"))
	before := treeSum(t, rootfs)

	for _, ref := range []string{repo + ":1", repo + "@" + digest} {
		out, errOut, code := sodactl("run", "--direct", "--image-store", store, "--image", ref, "--", "/bin/probe")
		if code != 0 {
			t.Fatalf("sodactl run --image %s: exit %d\n%s\n%s", ref, code, out, errOut)
		}
		for _, want := range []string{`os-release: "ID=soda-image-test\n"`, "stat /usr/bin/env: false", "stat /bin/sh: false", "write /bin/written: false", "write home: true"} {
			if !strings.Contains(out, want) {
				t.Errorf("--image %s: output lacks %q:\n%s", ref, want, out)
			}
		}
		if !strings.Contains(ref, "@") && !strings.Contains(errOut, "is "+digest) {
			t.Errorf("--image by tag: the digest it resolved to is not printed:\n%s", errOut)
		}
	}
	if after := treeSum(t, rootfs); after != before {
		t.Error("the image's root changed during the runs")
	}
	if ents, _ := os.ReadDir(filepath.Join(store, "rootfs")); len(ents) != 1 {
		t.Errorf("%d unpacked roots for one image, want 1 shared", len(ents))
	}
	// An image not in the store is pulled by the run; one that does not
	// exist fails before anything runs, with 125.
	if _, errOut, code := sodactl("run", "--direct", "--image-store", filepath.Join(bin, "store2"), "--image", repo+":1", "--", "/bin/probe"); code != 0 || !strings.Contains(errOut, "pulling it") {
		t.Errorf("--image not yet stored: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := sodactl("run", "--direct", "--image-store", store, "--image", repo+":nope", "--", "/bin/probe"); code != 125 {
		t.Errorf("--image of a missing tag: exit %d, want 125\n%s", code, errOut)
	}

	// The image's configuration: its PATH finds imgprobe (in /opt/tools
	// only), its WorkingDir is the command's when nothing else names one,
	// its variables come through, its HOME does not.
	cfgRef := repo + ":config"
	testkit.Push(t, cfgRef, testkit.Configure(t, testkit.ProbeImage(t, "ID=soda-image-test\n", "opt/tools/imgprobe"),
		[]string{"PATH=/opt/tools:/bin:relative", "IMAGE_VAR=from-image", "HOME=/root"}, "/opt"))
	out, errOut, code = sodactl("run", "--direct", "--image-store", store, "--image", cfgRef, "--", "imgprobe")
	if code != 0 {
		t.Fatalf("--image with a configuration: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"cwd: /opt\n", "PATH: /opt/tools:/bin\n", "IMAGE_VAR: from-image\n", "HOME: /home/agent\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("--image with a configuration: output lacks %q:\n%s", want, out)
		}
	}
	// A project (--rw) is where the command starts, not the image's
	// directory.
	proj := filepath.Join(bin, "project")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := sodactl("run", "--direct", "--rw", proj, "--image-store", store, "--image", cfgRef, "--", "imgprobe"); code != 0 || !strings.Contains(out, "cwd: "+proj+"\n") {
		t.Errorf("--image with --rw: exit %d, want the project as working directory\n%s\n%s", code, out, errOut)
	}
	// A WorkingDir the sandbox shows with its own contents is refused.
	testkit.Push(t, repo+":tmpdir", testkit.Configure(t, testkit.ProbeImage(t, "ID=soda-image-test\n"), nil, "/tmp"))
	if _, errOut, code := sodactl("run", "--direct", "--image-store", store, "--image", repo+":tmpdir", "--", "/bin/probe"); code != 125 || !strings.Contains(errOut, "a /tmp of its own") {
		t.Errorf("--image with WorkingDir /tmp: exit %d, want 125 and the reason\n%s", code, errOut)
	}
}

// TestRunImageAsUser: an unprivileged user (nobody, in the sandbox
// without a delegated cgroup: --allow-degraded cgroup) pulls the image
// into the store of its own home and runs on it.
func TestRunImageAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testkit.SkipHostLacks(t, "root: to run the test's user as nobody (CI runs as root)")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		testkit.SkipHostLacks(t, "a user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	if out, err := func() ([]byte, error) {
		c := exec.Command("unshare", "--user", "--map-root-user", "true")
		c.SysProcAttr, c.Dir = cred, "/"
		return c.CombinedOutput()
	}(); err != nil {
		testkit.SkipHostLacks(t, "unprivileged user namespaces (unshare --user as nobody: %v %s)", err, out)
	}
	bin, err := testkit.BuildBinaries("soda-images-user-", "sodactl", "soda-sandbox-init")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	home, runtime := filepath.Join(bin, "home"), filepath.Join(bin, "run")
	for _, d := range []string{home, runtime} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ref := testkit.Registry(t) + "/soda/probe:1"
	testkit.Push(t, ref, testkit.ProbeImage(t, "ID=soda-image-test\n"))
	as := func(args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(bin, "sodactl"), args...)
		cmd.SysProcAttr, cmd.Dir = cred, "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "USER=nobody", "XDG_RUNTIME_DIR=" + runtime}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	if out, errOut, code := as("image", "pull", ref); code != 0 {
		t.Fatalf("nobody: sodactl image pull: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "share", "soda", "images")); err != nil {
		t.Errorf("the user's store is not in its home: %v", err)
	}
	out, errOut, code := as("run", "--direct", "--allow-degraded", "cgroup", "--image", ref, "--", "/bin/probe")
	if code != 0 {
		t.Fatalf("nobody: sodactl run --image: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{`os-release: "ID=soda-image-test\n"`, "stat /usr/bin/env: false", "write /bin/written: false", "write home: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("nobody: output lacks %q:\n%s", want, out)
		}
	}
}
