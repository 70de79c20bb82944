package relay

// The control protocol's messages, from the relay to the host only (see
// the package egress documentation for the whole protocol).
const (
	// MsgConn is 'C' + port (uint16 BE), with one fd in SCM_RIGHTS.
	MsgConn = 'C'
	// MsgDNS is 'D' + qtype (uint16 BE) + query name.
	MsgDNS = 'D'
	// MaxQueryName is the longest query name in a 'D' message.
	MaxQueryName = 255
	// MaxControlMsg is the longest valid control message.
	MaxControlMsg = 3 + MaxQueryName
)
