package profile

import (
	"os/user"
	"strconv"
)

// lookupUser maps a user name to its uid through the user database.
func lookupUser(name string) (uint32, bool) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, false
	}
	return parseID(u.Uid)
}

// lookupGroup maps a group name to its gid through the group database.
func lookupGroup(name string) (uint32, bool) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, false
	}
	return parseID(g.Gid)
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}
