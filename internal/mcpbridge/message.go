package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// kind classifies a JSON-RPC message.
type kind int

const (
	kindInvalid kind = iota
	kindRequest
	kindNotification
	kindResponse
)

func (k kind) String() string {
	switch k {
	case kindRequest:
		return "request"
	case kindNotification:
		return "notification"
	case kindResponse:
		return "response"
	}
	return "invalid"
}

// message is one JSON-RPC message: its raw bytes, relayed unchanged, and the
// few fields the bridge routes on.
type message struct {
	raw    []byte
	kind   kind
	id     string // canonical id key; empty for notifications
	method string
	// progressToken is params._meta.progressToken (requests) or
	// params.progressToken (progress notifications), canonicalised.
	progressToken string
	// requestID is params.requestId of notifications/cancelled.
	requestID string
	// protocolVersion is params._meta["io.modelcontextprotocol/protocolVersion"].
	protocolVersion string
}

// envelope holds the fields read from every message.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Meta *struct {
			ProgressToken   json.RawMessage `json:"progressToken"`
			ProtocolVersion string          `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
		ProgressToken json.RawMessage `json:"progressToken"`
		RequestID     json.RawMessage `json:"requestId"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

var errNotObject = errors.New("message is not a JSON object")

// parseMessage classifies one JSON-RPC message. raw must be a single JSON
// value; it is kept as is.
func parseMessage(raw []byte) (message, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field == "" {
			return message{}, errNotObject
		}
		return message{}, fmt.Errorf("malformed JSON-RPC message: %w", err)
	}
	if env.JSONRPC != "2.0" {
		return message{}, errors.New(`malformed JSON-RPC message: "jsonrpc" must be "2.0"`)
	}
	m := message{raw: raw, method: env.Method}
	hasID := len(env.ID) > 0 && !bytes.Equal(env.ID, []byte("null"))
	if hasID {
		id, err := canonicalID(env.ID)
		if err != nil {
			return message{}, err
		}
		m.id = id
	}
	switch {
	case env.Method != "" && hasID:
		m.kind = kindRequest
	case env.Method != "":
		m.kind = kindNotification
	case hasID && (env.Result != nil || env.Error != nil):
		m.kind = kindResponse
	case env.Error != nil:
		// An error response with a null id (e.g. a parse error).
		m.kind = kindResponse
	default:
		return message{}, errors.New("malformed JSON-RPC message: neither request, notification nor response")
	}
	if p := env.Params; p != nil {
		if p.Meta != nil {
			m.protocolVersion = p.Meta.ProtocolVersion
			if len(p.Meta.ProgressToken) > 0 {
				m.progressToken, _ = canonicalID(p.Meta.ProgressToken)
			}
		}
		if env.Method == "notifications/progress" && len(p.ProgressToken) > 0 {
			m.progressToken, _ = canonicalID(p.ProgressToken)
		}
		if env.Method == "notifications/cancelled" && len(p.RequestID) > 0 {
			m.requestID, _ = canonicalID(p.RequestID)
		}
	}
	return m, nil
}

// canonicalID turns a JSON-RPC id or progress token (string or number) into a
// map key that keeps strings and numbers apart: "s:abc", "n:42".
func canonicalID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("empty id")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("malformed id: %w", err)
		}
		return "s:" + s, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return "", fmt.Errorf("malformed id: %w", err)
		}
		if i, err := n.Int64(); err == nil {
			return "n:" + strconv.FormatInt(i, 10), nil
		}
		return "n:" + n.String(), nil
	}
	return "", fmt.Errorf("id must be a string or a number, got %s", truncate(raw, 40))
}

// rawID turns a canonical id back into JSON.
func rawID(key string) json.RawMessage {
	if len(key) < 2 {
		return json.RawMessage("null")
	}
	if key[0] == 's' {
		b, _ := json.Marshal(key[2:])
		return b
	}
	return json.RawMessage(key[2:])
}

// splitBody parses an HTTP body into messages. It reports whether the body
// was a JSON array (a batch).
func splitBody(body []byte) ([]message, bool, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, false, errors.New("empty body")
	}
	if body[0] != '[' {
		m, err := parseMessage(compactLine(body))
		if err != nil {
			return nil, false, err
		}
		return []message{m}, false, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return nil, true, fmt.Errorf("malformed JSON-RPC batch: %w", err)
	}
	if len(items) == 0 {
		return nil, true, errors.New("empty JSON-RPC batch")
	}
	msgs := make([]message, 0, len(items))
	for i, it := range items {
		m, err := parseMessage(compactLine(it))
		if err != nil {
			return nil, true, fmt.Errorf("batch item %d: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, true, nil
}

// compactLine makes sure raw has no newline, since stdio framing is one
// message per line.
func compactLine(raw []byte) []byte {
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return raw
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw // parseMessage reports the error
	}
	return buf.Bytes()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// JSON-RPC error codes used by the bridge.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternalError  = -32603
	// codeServerGone is sent for requests whose child exited or never started.
	codeServerGone = -32000
	// codeTimeout is sent for requests the child did not answer in time.
	codeTimeout = -32001
	// codeBusy is sent when the session cap is reached or the bridge drains.
	codeBusy = -32002
	// codeHeaderMismatch is SEP-2575's HeaderMismatch (go-sdk's
	// CodeHeaderMismatch).
	codeHeaderMismatch = -32020
	// codeMissingCapability is SEP-2575's MissingRequiredClientCapabilityError.
	codeMissingCapability = -32021
	// codeUnsupportedVersion is SEP-2575's UnsupportedProtocolVersionError
	// (go-sdk's CodeUnsupportedProtocolVersion).
	codeUnsupportedVersion = -32022
)

// errorResponseID builds a JSON-RPC error response for a raw JSON id.
func errorResponseID(id json.RawMessage, code int, msg string, data any) []byte {
	type rpcErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcErr          `json:"error"`
	}{"2.0", id, rpcErr{code, msg, data}})
	return b
}

// rewriteID returns msg with its "id" member replaced by id.
func rewriteID(msg []byte, id json.RawMessage) []byte {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil {
		return msg
	}
	obj["id"] = id
	out, err := marshalJSON(obj)
	if err != nil {
		return msg
	}
	return out
}
