package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-systemd/v22/activation"
)

// Activated reports whether systemd passed listening sockets to this
// process ($LISTEN_PID names us and $LISTEN_FDS is set).
func Activated() bool {
	return os.Getenv("LISTEN_PID") == fmt.Sprint(os.Getpid()) && os.Getenv("LISTEN_FDS") != ""
}

// Listeners returns the stream sockets systemd passed, keyed by their
// FileDescriptorName= (systemd names unnamed ones after the socket unit).
// It unsets the LISTEN_* variables so children do not see them.
func Listeners() (map[string][]net.Listener, error) {
	if !Activated() {
		return nil, errors.New("not socket-activated: $LISTEN_PID/$LISTEN_FDS not set for this process")
	}
	files := activation.Files(true)
	out := map[string][]net.Listener{}
	for _, f := range files {
		l, err := net.FileListener(f)
		name := f.Name()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("passed fd %q is not a stream socket: %w", name, err)
		}
		out[name] = append(out[name], l)
	}
	if len(out) == 0 {
		return nil, errors.New("socket-activated, but no sockets were passed")
	}
	return out, nil
}
