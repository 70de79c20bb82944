package sandbox

import (
	"errors"
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

// checkNoNetwork refuses a closed-network spec that also grants egress.
func checkNoNetwork(s *Spec) error {
	if s.NoNetwork && (len(s.Egress.Allow) > 0 || len(s.Egress.MCPPorts) > 0) {
		return errors.New("sandbox: no network, yet egress is granted (--allow or MCP servers)")
	}
	return nil
}

// netEnv is the environment that points programs at the proxy; none when
// there is no network.
func netEnv(s *Spec) []string {
	if s.NoNetwork {
		return nil
	}
	proxy := fmt.Sprintf("http://127.0.0.1:%d", s.Egress.ProxyPort)
	return []string{
		"HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"HTTP_PROXY=" + proxy, "http_proxy=" + proxy,
		"ALL_PROXY=" + proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}
