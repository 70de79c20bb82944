package sandbox

import (
	"fmt"
	"net"
	"os"
)

// Closed network (Spec.NoNetwork): the sandbox's network namespace has only
// loopback up and nothing listening on it. Init starts no relay and no DNS
// sink (internal/sandboxinit), and the host starts no proxy: there is no
// control socket to serve (init's egress descriptor is /dev/null, which it
// closes at once).

// egressSocket makes the egress control socket (see controlSocket), or,
// with closed, only the placeholder init's descriptor list expects.
func egressSocket(closed bool) (*net.UnixConn, *os.File, error) {
	if !closed {
		return controlSocket()
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, fmt.Errorf("egress placeholder: %w", err)
	}
	return nil, f, nil
}
