package mcpbridge

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Result translation for stateless clients. The shared child speaks
// 2025-11-25 or older, whose results carry neither resultType nor, on most
// list results, the caching hints that 2026-07-28 requires; a stateless
// client validates against the 2026-07-28 schema. The bridge, the one party
// that knows both sides, adds them where the child did not.

// cacheableMethods are the methods whose 2026-07-28 results are a
// CacheableResult (SEP-2549): ttlMs and cacheScope are required there.
var cacheableMethods = map[string]bool{
	"server/discover":          true,
	"tools/list":               true,
	"prompts/list":             true,
	"resources/list":           true,
	"resources/templates/list": true,
	"resources/read":           true,
}

// Caching hints the bridge adds where the child gave none: stale at once
// (ttlMs 0, so a client re-fetches whenever it needs the result) and private
// (the result may depend on who asks; no shared cache may keep it). The
// bridge cannot know more than that about a child's data.
const (
	defaultTTLMs      = "0"
	defaultCacheScope = `"private"`
)

// statelessCall is what the bridge knows about one stateless request while
// its answer is relayed.
type statelessCall struct {
	method string
}

// answer rewrites the child's answer to the request for a stateless client:
// a result gets resultType "complete" unless the child set one and, for
// cacheable methods, ttlMs and cacheScope where absent. Error answers and
// results that are not JSON objects are passed through.
func (c *statelessCall) answer(raw []byte) []byte {
	return completeResult(raw, c.method)
}

// httpStatus is the HTTP status of a lone JSON answer, as SEP-2575 maps
// JSON-RPC errors onto HTTP: method not found 404; invalid params,
// unsupported protocol version and missing client capability 400;
// everything else 200.
func (c *statelessCall) httpStatus(raw []byte) int {
	if !bytes.Contains(raw, []byte(`"error"`)) {
		return http.StatusOK
	}
	var resp struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &resp) != nil || resp.Error == nil {
		return http.StatusOK
	}
	return statusForCode(resp.Error.Code)
}

// statusForCode maps a JSON-RPC error code onto the HTTP status that
// SEP-2575 requires for it.
func statusForCode(code int) int {
	switch code {
	case codeMethodNotFound:
		return http.StatusNotFound
	case codeInvalidParams, codeUnsupportedVersion, codeMissingCapability:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// completeResult adds resultType (and, for cacheable methods, the caching
// hints) to the result in the JSON-RPC response raw.
func completeResult(raw []byte, method string) []byte {
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(raw, &resp); err != nil {
		return raw
	}
	res, ok := resp["result"]
	if !ok {
		return raw
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(res, &obj); err != nil || obj == nil {
		return raw // not an object: nothing we may add to
	}
	changed := setDefault(obj, "resultType", `"complete"`)
	if cacheableMethods[method] {
		changed = setDefault(obj, "ttlMs", defaultTTLMs) || changed
		changed = setDefault(obj, "cacheScope", defaultCacheScope) || changed
	}
	if !changed {
		return raw
	}
	nres, err := marshalJSON(obj)
	if err != nil {
		return raw
	}
	resp["result"] = nres
	out, err := marshalJSON(resp)
	if err != nil {
		return raw
	}
	return out
}

// marshalJSON is json.Marshal without HTML escaping: strings of the child
// keep their <, > and & as the child wrote them, instead of turning into
// \u003c and the like on the way through the bridge.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// setDefault sets obj[key] to the JSON value v unless it is present and not
// null, and reports whether it did.
func setDefault(obj map[string]json.RawMessage, key, v string) bool {
	if cur, ok := obj[key]; ok && !bytes.Equal(bytes.TrimSpace(cur), []byte("null")) {
		return false
	}
	obj[key] = json.RawMessage(v)
	return true
}
