package egress

import (
	"context"
	"net/netip"
	"time"
)

// Event kinds.
const (
	// KindConnect is a connection on the CONNECT proxy port, or on a port
	// that is not granted.
	KindConnect = "connect"
	// KindMCP is a connection on an MCP port.
	KindMCP = "mcp"
	// KindDNS is a DNS query captured in the sandbox.
	KindDNS = "dns"
	// KindControl is a malformed control message.
	KindControl = "control"
	// KindHTTP is one HTTP request on a connection whose TLS the proxy
	// terminated (a target with a secret or HTTP rule): Method, Path
	// (never the query) and Status say which.
	KindHTTP = "http"
)

// Event decisions.
const (
	// DecisionAllow means bytes were relayed to the target.
	DecisionAllow = "allow"
	// DecisionDeny means the attempt was refused or failed before any byte
	// was relayed; Reason says why.
	DecisionDeny = "deny"
)

// Event is the audit record of one attempt.
type Event struct {
	// Time is when the attempt started.
	Time time.Time `json:"time"`
	// Kind is KindConnect, KindMCP, KindDNS or KindControl.
	Kind string `json:"kind"`
	// Port is the port the connection was accepted on in the sandbox.
	Port uint16 `json:"port"`
	// Target is what was asked for: host:port for CONNECT and MCP, the
	// query name and type for DNS.
	Target string `json:"target,omitempty"`
	// Addr is the validated IP:port that was dialled.
	Addr string `json:"addr,omitempty"`
	// Decision is DecisionAllow or DecisionDeny.
	Decision string `json:"decision"`
	// Reason says why an attempt was denied, or why an allowed one ended
	// early ("idle timeout").
	Reason string `json:"reason,omitempty"`
	// BytesUp counts bytes from the sandbox to the target.
	BytesUp int64 `json:"bytes_up"`
	// BytesDown counts bytes from the target to the sandbox.
	BytesDown int64 `json:"bytes_down"`
	// DurationMS is how long the attempt took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// Method, Path (never the query) and Status describe a KindHTTP
	// request.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Status int    `json:"status,omitempty"`
}

// Resolver looks up the addresses of a host. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}
