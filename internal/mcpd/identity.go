package mcpd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/serverconf"
)

// DefaultChildUser is the user a root soda-mcpd runs its children as when
// the configuration names none; packaging/sysusers.d creates it. When it
// does not exist, children run as FallbackChildUser, with a warning.
const (
	DefaultChildUser  = "soda-mcp"
	FallbackChildUser = "nobody"
)

// childIdentity decides who the children run as: User= and Group= when
// set; else, when soda-mcpd is root, DefaultChildUser (or
// FallbackChildUser); else soda-mcpd's own user (nil: no switch). It also
// returns the HOME, USER and LOGNAME a switched child gets.
func childIdentity(log *slog.Logger, cfg serverconf.Server, euid int) (*child.Identity, []string, error) {
	name := cfg.User
	if name == "" && cfg.Group == "" && euid != 0 {
		return nil, nil, nil
	}
	if name == "" && euid == 0 {
		name = DefaultChildUser
		if _, err := user.Lookup(name); err != nil {
			log.Warn("children run as "+FallbackChildUser+": user "+DefaultChildUser+" does not exist (create it with systemd-sysusers, see packaging/sysusers.d/soda.conf, or set User= in [Server])",
				"user", FallbackChildUser)
			name = FallbackChildUser
		}
	}
	var u *user.User
	if name == "" {
		var err error
		if u, err = user.LookupId(strconv.Itoa(euid)); err != nil {
			u = &user.User{Uid: strconv.Itoa(euid), Gid: strconv.Itoa(os.Getegid()), Username: strconv.Itoa(euid)}
		}
	} else {
		var err error
		u, err = lookupUser(name)
		if err != nil {
			return nil, nil, fmt.Errorf("User=%s: %w", name, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("User=%s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("User=%s: gid %q: %w", name, u.Gid, err)
	}
	id := &child.Identity{Name: u.Username, UID: uint32(uid), GID: uint32(gid)}
	if cfg.Group != "" {
		g, err := lookupGroup(cfg.Group)
		if err != nil {
			return nil, nil, fmt.Errorf("Group=%s: %w", cfg.Group, err)
		}
		id.GID = g
	}
	// Supplementary groups: those of the user, as login would give them.
	if gids, err := u.GroupIds(); err == nil {
		for _, s := range gids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil && uint32(g) != id.GID {
				id.Groups = append(id.Groups, uint32(g))
			}
		}
	}
	if euid != 0 && (int(id.UID) != euid || int(id.GID) != os.Getegid() || len(id.Groups) > 0) {
		if int(id.UID) == euid && cfg.Group == "" {
			return nil, nil, nil // ourselves, with our own groups
		}
		return nil, nil, fmt.Errorf("User=%s/Group=%s: only a root soda-mcpd can run its children as another user or group", cfg.User, cfg.Group)
	}
	var env []string
	if u.HomeDir != "" && filepath.IsAbs(u.HomeDir) {
		env = append(env, "HOME="+u.HomeDir)
	}
	env = append(env, "USER="+u.Username, "LOGNAME="+u.Username)
	return id, env, nil
}

// lookupUser finds a user by name, or by number (a number unknown to the
// user database is taken as it is, with the same number as group).
func lookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err == nil {
		return u, nil
	}
	if _, perr := strconv.ParseUint(name, 10, 32); perr == nil {
		if u, err := user.LookupId(name); err == nil {
			return u, nil
		}
		return &user.User{Uid: name, Gid: name, Username: name}, nil
	}
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return nil, fmt.Errorf("no such user")
	}
	return nil, err
}

// lookupGroup finds a group id by name or number.
func lookupGroup(name string) (uint32, error) {
	if g, err := user.LookupGroup(name); err == nil {
		n, err := strconv.ParseUint(g.Gid, 10, 32)
		return uint32(n), err
	}
	n, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		return 0, errors.New("no such group")
	}
	return uint32(n), nil
}

// warnUnreachable warns, once at start, about each file of the command
// line (the program, existing paths among its arguments, the working
// directory) that the children's user cannot reach by the permission bits
// of the path's components: a root soda-mcpd runs its children as another
// user, and a server in a 0700 home then fails with an obscure "not found".
// It is a warning, not a refusal: ACLs and capabilities are not modelled.
func warnUnreachable(log *slog.Logger, id *child.Identity, cfg serverconf.Server) {
	if id == nil {
		return
	}
	var paths []string
	if p, err := exec.LookPath(cfg.Command[0]); err == nil {
		paths = append(paths, p)
	}
	for _, a := range cfg.Command[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if _, err := os.Stat(a); err == nil {
			paths = append(paths, a)
		}
	}
	if cfg.Dir != "" {
		paths = append(paths, cfg.Dir)
	}
	for _, p := range paths {
		if err := reachable(id, p); err != nil {
			log.Warn("the children's user cannot reach a file of the server's command line: set User= (or --user) to a user that can, or make the path readable",
				"user", id.String(), "path", p, "reason", err.Error())
		}
	}
}

// reachable checks, by permission bits alone, that id can search every
// directory on the way to path and read path itself.
func reachable(id *child.Identity, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	cur := "/"
	parts := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	for i, part := range append([]string{""}, parts...) {
		if part != "" {
			cur = filepath.Join(cur, part)
		}
		fi, err := os.Stat(cur)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		need, what := uint32(1), "search" // x
		if i == len(parts) {
			need, what = 4, "read" // r
		}
		if !fi.IsDir() && i < len(parts) {
			return nil
		}
		if !permits(id, st, need) {
			return fmt.Errorf("%s cannot %s %s (mode %04o, owner %d:%d)", id.Name, what, cur, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return nil
}

// permits applies the owner, group, other rule of st's mode to id.
func permits(id *child.Identity, st *syscall.Stat_t, bit uint32) bool {
	if id.UID == 0 {
		return true // uid 0 without capabilities still owns root's files; close enough
	}
	mode := uint32(st.Mode) & 0o777 // uint16 on macOS
	switch {
	case st.Uid == id.UID:
		return mode>>6&bit != 0
	case st.Gid == id.GID || slices.Contains(id.Groups, st.Gid):
		return mode>>3&bit != 0
	}
	return mode&bit != 0
}
