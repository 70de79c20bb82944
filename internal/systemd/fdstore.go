package systemd

import (
	"errors"
	"fmt"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
)

// FDStore is the service manager's file descriptor store for this service
// (FileDescriptorStoreMax= in its unit, sd_pid_notify_with_fds(3)): what
// is stored there survives a restart or a crash of the service and comes
// back at its next start (StoredFiles). The zero value, or one made
// without $NOTIFY_SOCKET, stores nothing: Store fails with ErrNoFDStore.
type FDStore struct {
	addr string // $NOTIFY_SOCKET, "@" for an abstract one
}

// ErrNoFDStore says that no service manager listens ($NOTIFY_SOCKET unset).
var ErrNoFDStore = errors.New("no service manager file descriptor store ($NOTIFY_SOCKET is not set)")

// NewFDStore returns the store of the service manager $NOTIFY_SOCKET
// names.
func NewFDStore() *FDStore {
	s := &FDStore{}
	s.addr = os.Getenv("NOTIFY_SOCKET")
	return s
}

// Available reports whether there is a store to send to.
func (s *FDStore) Available() bool { return s != nil && s.addr != "" }

// Store passes copies of files to the store under name (printable ASCII
// without ':', at most 255 bytes). The manager refuses them beyond the
// unit's FileDescriptorStoreMax=, and drops a stored socket or pipe once
// its other end hangs up.
func (s *FDStore) Store(name string, files ...*os.File) error {
	if err := checkFDName(name); err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return s.send("FDSTORE=1\nFDNAME="+name, fds)
}

// Remove drops every descriptor stored under name.
func (s *FDStore) Remove(name string) error {
	if err := checkFDName(name); err != nil {
		return err
	}
	return s.send("FDSTOREREMOVE=1\nFDNAME="+name, nil)
}

// checkFDName applies systemd's rule for FDNAME=.
func checkFDName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("fd store name %q: 1 to 255 bytes", name)
	}
	for _, c := range []byte(name) {
		if c < ' ' || c > '~' || c == ':' {
			return fmt.Errorf("fd store name %q: printable ASCII without ':'", name)
		}
	}
	return nil
}

// StoredFiles returns what the service manager passed at this start
// ($LISTEN_FDS, $LISTEN_FDNAMES: the store's descriptors and any sockets),
// keyed by name, and unsets those variables. Without them it is empty.
func StoredFiles() map[string][]*os.File {
	out := map[string][]*os.File{}
	for _, f := range activation.Files(true) {
		out[f.Name()] = append(out[f.Name()], f)
	}
	return out
}
