package mcpd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/config"
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
func childIdentity(log *slog.Logger, cfg config.Server, euid int) (*child.Identity, []string, error) {
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
