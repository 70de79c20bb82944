package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// knownProtocols are the protocol versions a server may answer with.
var knownProtocols = map[string]bool{
	"2024-11-05": true,
	"2025-03-26": true,
	"2025-06-18": true,
	"2025-11-25": true,
}

// rpcMessage is an incoming JSON-RPC message.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// requestBodies pre-renders the messages a session sends.
type requestBodies struct {
	initPrefix []byte // initialize with "id": left open
	initSuffix []byte
	callPrefix []byte // {"jsonrpc":"2.0","id":
	callSuffix []byte // ,"method":"tools/call","params":{...}}
	initNotif  []byte
}

func newRequestBodies(cfg *config) (*requestBodies, error) {
	initParams, err := json.Marshal(map[string]any{
		"protocolVersion": cfg.protocol,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "mcpload", "version": "1.0.0"},
	})
	if err != nil {
		return nil, fmt.Errorf("encode initialize params: %w", err)
	}
	callParams, err := json.Marshal(map[string]any{"name": cfg.tool, "arguments": cfg.args})
	if err != nil {
		return nil, fmt.Errorf("encode tools/call params: %w", err)
	}
	return &requestBodies{
		initPrefix: []byte(`{"jsonrpc":"2.0","id":`),
		initSuffix: append(append([]byte(`,"method":"initialize","params":`), initParams...), '}'),
		callPrefix: []byte(`{"jsonrpc":"2.0","id":`),
		callSuffix: append(append([]byte(`,"method":"tools/call","params":`), callParams...), '}'),
		initNotif:  []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`),
	}, nil
}

func (b *requestBodies) initialize(id int) []byte {
	return concatID(b.initPrefix, id, b.initSuffix)
}

func (b *requestBodies) call(id int) []byte {
	return concatID(b.callPrefix, id, b.callSuffix)
}

func concatID(prefix []byte, id int, suffix []byte) []byte {
	out := make([]byte, 0, len(prefix)+len(suffix)+12)
	out = append(out, prefix...)
	out = strconv.AppendInt(out, int64(id), 10)
	return append(out, suffix...)
}

// matchResponse decodes data (a message or a batch) and returns the response
// whose id is id, or nil if data holds none.
func matchResponse(data []byte, id int) (*rpcMessage, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	want := strconv.Itoa(id)
	var msgs []rpcMessage
	if data[0] == '[' {
		if err := json.Unmarshal(data, &msgs); err != nil {
			return nil, fmt.Errorf("decode batch: %w", err)
		}
	} else {
		var m rpcMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decode message: %w", err)
		}
		msgs = append(msgs, m)
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Method != "" {
			continue // notification or server->client request
		}
		if idEquals(m.ID, want) {
			return m, nil
		}
	}
	return nil, nil
}

// idEquals compares a raw JSON id with a decimal integer id, accepting the
// number as a JSON string too.
func idEquals(raw json.RawMessage, want string) bool {
	s := string(bytes.TrimSpace(raw))
	return s == want || s == `"`+want+`"`
}

// checkInit validates an initialize response and returns the negotiated
// protocol version.
func checkInit(m *rpcMessage, checkVersion bool) (string, error) {
	if m.Error != nil {
		return "", fmt.Errorf("initialize: JSON-RPC error %d: %s", m.Error.Code, m.Error.Message)
	}
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		return "", fmt.Errorf("initialize: decode result: %w", err)
	}
	if r.ProtocolVersion == "" {
		return "", errors.New("initialize: result has no protocolVersion")
	}
	if checkVersion && !knownProtocols[r.ProtocolVersion] {
		return "", fmt.Errorf("initialize: unknown protocolVersion %q", r.ProtocolVersion)
	}
	return r.ProtocolVersion, nil
}

// checkCall validates a tools/call response.
func checkCall(m *rpcMessage, expect string) error {
	if m.Error != nil {
		return fmt.Errorf("tools/call: JSON-RPC error %d: %s", m.Error.Code, m.Error.Message)
	}
	var r struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		return fmt.Errorf("tools/call: decode result: %w", err)
	}
	if r.IsError {
		return fmt.Errorf("tools/call: isError result: %s", truncate(string(m.Result), 200))
	}
	if expect != "" {
		if len(r.Content) == 0 || !strings.Contains(r.Content[0].Text, expect) {
			return fmt.Errorf("tools/call: result does not contain %q: %s", expect, truncate(string(m.Result), 200))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func sortDurations(d []time.Duration) { slices.Sort(d) }

// percentile is the nearest-rank percentile of sorted d (0 if empty).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	idx := int(math.Ceil(p/100*float64(len(d)))) - 1
	idx = min(max(idx, 0), len(d)-1)
	return d[idx]
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
