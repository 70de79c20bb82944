package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/soda-project/soda/test/testkit"
)

// writeProbeLayout writes, as an OCI layout in dir, the probe image
// (testkit.ProbeImage) and returns its manifest digest.
func writeProbeLayout(t *testing.T, dir string) string {
	t.Helper()
	img := testkit.ProbeImage(t, "ID=soda-e2e-image\n")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

// profileImage: a profile's Image= (issue 26). The administrator imports
// an image into the host's store; alice's sandbox of that profile runs on
// it (the host's /usr is not there), and its status names the image.
func profileImage(t *testing.T, b *box, as func(string, ...string) result, art string) {
	t.Helper()
	layoutDir := filepath.Join(art, "probe-layout")
	digest := writeProbeLayout(t, layoutDir)
	if err := exec.Command("chmod", "-R", "a+rX", layoutDir).Run(); err != nil {
		t.Fatal(err)
	}
	if r := b.run("/usr/bin/sodactl", "image", "import", layoutDir); r.err != nil || !strings.Contains(r.stdout, digest) {
		t.Fatalf("sodactl image import in the box: %s", r)
	}
	must(t, b.sh("printf '[Profile]\\nDescription=on an image\\nUsers=alice\\nImage=soda/probe@"+digest+"\\n' > /etc/soda/sandbox/img.conf"))
	call := filepath.Join(art, "sodadcall")
	r := as("alice", call, "-profile", "img", "--", "/bin/probe")
	if r.err != nil || !strings.Contains(r.stdout, `os-release: "ID=soda-e2e-image\n"`) || !strings.Contains(r.stdout, "stat /usr/bin/env: false") ||
		!strings.Contains(r.stdout, "write /bin/written: false") {
		t.Errorf("alice, profile img: want the image's system:\n%s", r)
	}
	r = as("alice", call, "-profile", "img", "-no-wait", "-no-stdio", "--", "/bin/probe")
	if r.err != nil {
		t.Fatalf("alice, profile img, -no-wait: %s", r)
	}
	st := as("alice", "/usr/bin/sodactl", "sandbox", "status", strings.TrimSpace(r.stdout))
	if !strings.Contains(st.stdout, "soda/probe@"+digest) {
		t.Errorf("sodactl sandbox status does not name the image:\n%s", st)
	}
	// A tag in a profile makes it a profile that does not parse: no
	// sandbox from it, and the journal says why (as for any broken
	// profile, the caller is only told there is no such profile).
	must(t, b.sh("printf '[Profile]\\nUsers=alice\\nImage=soda/probe:1\\n' > /etc/soda/sandbox/tag.conf"))
	if r := as("alice", call, "-profile", "tag", "--", "/bin/probe"); r.err == nil {
		t.Errorf("a profile with an image tag made a sandbox:\n%s", r)
	}
	if j := b.run("journalctl", "-u", "sodad", "--no-pager").stdout; !strings.Contains(j, "a profile names its image by digest") {
		t.Error("the journal does not say why the profile with an image tag is refused")
	}
}
