// Package dbustest starts a private dbus-daemon for unit tests of D-Bus
// clients and services: a session-type bus in a temporary directory, with
// an open policy, never the host's system or session bus. The end-to-end
// tests use the real system bus in the systemd box instead.
package dbustest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PrivateBus starts a dbus-daemon of its own and returns its address; it
// is stopped when the test ends. Each name in activatable gets a service
// file (Exec=/bin/false), so that the bus lists it as activatable without
// starting anything. The test is skipped, with the reason, when
// dbus-daemon is not installed.
func PrivateBus(t testing.TB, activatable ...string) string {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed (apt-get install dbus): this test needs a private bus")
	}
	dir := t.TempDir()
	services := ""
	if len(activatable) > 0 {
		sd := filepath.Join(dir, "services")
		if err := os.Mkdir(sd, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range activatable {
			if err := os.WriteFile(filepath.Join(sd, name+".service"),
				[]byte("[D-BUS Service]\nName="+name+"\nExec=/bin/false\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		services = "<servicedir>" + sd + "</servicedir>"
	}
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir=`+dir+`</listen>
  <auth>EXTERNAL</auth>
  `+services+`
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	return strings.TrimSpace(line)
}
