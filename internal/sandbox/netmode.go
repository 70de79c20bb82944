package sandbox

import (
	"errors"
	"fmt"
)

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
