package mcpd

import (
	"log/slog"
	"os/user"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/serverconf"
)

func TestChildIdentity(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here")
	}
	_, haveDefault := user.Lookup(DefaultChildUser)
	wantRootDefault := FallbackChildUser
	if haveDefault == nil {
		wantRootDefault = DefaultChildUser
	}
	for _, c := range []struct {
		name     string
		user     string
		group    string
		euid     int
		wantName string // "" for no switch
		wantErr  string
		wantWarn bool
	}{
		{name: "root, no User=: the unprivileged default", euid: 0, wantName: wantRootDefault, wantWarn: haveDefault != nil},
		{name: "root, User=nobody", user: "nobody", euid: 0, wantName: "nobody"},
		{name: "root, User=root is explicit", user: "root", euid: 0, wantName: "root"},
		{name: "unprivileged, no User=: itself", euid: 4242},
		{name: "unprivileged, another user", user: "nobody", euid: 4242, wantErr: "only a root soda-mcpd"},
		{name: "unknown user", user: "soda-no-such-user", euid: 0, wantErr: "no such user"},
		{name: "unknown group", user: "nobody", group: "soda-no-such-group", euid: 0, wantErr: "no such group"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			id, env, err := childIdentity(log, serverconf.Server{User: c.user, Group: c.group}, c.euid)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.wantName == "" {
				if id != nil {
					t.Errorf("identity %v, want none (no switch)", id)
				}
				return
			}
			if id == nil || id.Name != c.wantName {
				t.Fatalf("identity %v, want %s", id, c.wantName)
			}
			if c.wantName == "nobody" && id.UID != 65534 && nobody.Uid == "65534" {
				t.Errorf("uid %d, want 65534", id.UID)
			}
			if !strings.Contains(strings.Join(env, " "), "USER="+c.wantName) {
				t.Errorf("env %q lacks USER=%s", env, c.wantName)
			}
			if got := strings.Contains(logs.String(), "does not exist"); got != c.wantWarn {
				t.Errorf("warning logged: %v, want %v:\n%s", got, c.wantWarn, logs.String())
			}
		})
	}
}
