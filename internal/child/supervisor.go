package child

import "fmt"

// Identity is a user and group a child runs as.
type Identity struct {
	// Name names the user for logs.
	Name string `json:"name,omitempty"`
	// UID and GID are the user and primary group ids.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are the supplementary group ids (none if empty).
	Groups []uint32 `json:"groups,omitempty"`
}

// String names the identity for logs: "(unchanged)" when id is nil.
func (id *Identity) String() string {
	if id == nil {
		return "(unchanged)"
	}
	return fmt.Sprintf("%s (uid %d, gid %d)", id.Name, id.UID, id.GID)
}
