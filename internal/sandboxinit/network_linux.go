package sandboxinit

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/soda-project/soda/internal/egress/relay"
)

// setupNetwork is init's side: with a network, it listens on the relay
// ports (and the DNS sink) and opens the control socket at fd; closed, it
// closes fd and listens on nothing. The relay it returns serves no
// listener when closed (Serve returns at once).
func setupNetwork(cfg *config, fd int) (r *relay.Relay, lns []net.Listener, dns net.PacketConn, detail string, err error) {
	ctlFile := os.NewFile(uintptr(fd), "egress")
	if cfg.NoNetwork {
		ctlFile.Close()
		return &relay.Relay{}, nil, nil, "loopback only; no network: no relay, no DNS, nothing listening", nil
	}
	defer ctlFile.Close()
	if lns, err = relay.Listen(cfg.RelayPorts); err != nil {
		return nil, nil, nil, "", fmt.Errorf("relay: %w", err)
	}
	if cfg.DNS {
		if dns, err = relay.ListenDNS(); err != nil {
			return nil, nil, nil, "", fmt.Errorf("dns sink: %w", err)
		}
	}
	ctlConn, err := net.FileConn(ctlFile)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("egress control socket: %w", err)
	}
	r = &relay.Relay{Control: ctlConn.(*net.UnixConn), Log: slog.New(slog.DiscardHandler)}
	return r, lns, dns, fmt.Sprintf("loopback only; relay on 127.0.0.1 ports %v", cfg.RelayPorts), nil
}
