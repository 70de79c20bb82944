package mcpbridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// The request rules of the stateless revision (SEP-2575, SEP-2243), checked
// by the bridge before a request reaches the shared child, which speaks an
// older revision and knows none of them.

// Header names of SEP-2243 and keys of the per-request _meta of SEP-2575.
const (
	headerName             = "Mcp-Name"
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// removedMethods are the methods 2026-07-28 removed: a stateless client
// gets 404 for them even though the child, of an older revision, would
// answer them.
var removedMethods = []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}

// ruleError is a rejection of a stateless request: an HTTP status and a
// JSON-RPC error carrying the request's id.
type ruleError struct {
	status int
	code   int
	msg    string
	data   any
}

func (e *ruleError) write(w http.ResponseWriter, id json.RawMessage) {
	httpErrorData(w, e.status, id, e.code, e.msg, e.data)
}

// statelessParams are the fields of a stateless request's params that the
// rules look at.
type statelessParams struct {
	Params *struct {
		Meta   map[string]json.RawMessage `json:"_meta"`
		Name   json.RawMessage            `json:"name"`
		URI    json.RawMessage            `json:"uri"`
		TaskID json.RawMessage            `json:"taskId"`
	} `json:"params"`
}

// unsupportedVersion is the UnsupportedProtocolVersionError for revision v.
func unsupportedVersion(v string) *ruleError {
	return &ruleError{
		status: http.StatusBadRequest, code: codeUnsupportedVersion,
		msg:  fmt.Sprintf("unsupported %s %q; supported: %s", headerProtocolVersion, v, strings.Join(SupportedVersions(), ", ")),
		data: map[string]any{"supported": SupportedVersions(), "requested": v},
	}
}

// checkStateless applies the rules to the request m of a stateless POST
// whose Mcp-Protocol-Version header is ver, in the order the revision's
// reference checks them:
//
//  1. Mcp-Protocol-Version header missing: 400, HeaderMismatch (-32020).
//  2. params._meta missing, or without protocolVersion or
//     clientCapabilities: 400, invalid params (-32602).
//  3. _meta protocolVersion differs from the header: 400, -32020.
//  4. a revision that is not a stateless one: 400,
//     UnsupportedProtocolVersionError (-32022) with the supported list.
//  5. Mcp-Method header missing or not the method (values are
//     case-sensitive; surrounding whitespace is not part of the value):
//     400, -32020.
//  6. for tools/call, prompts/get (params.name), resources/read
//     (params.uri), tasks/get, tasks/update, tasks/cancel (params.taskId):
//     Mcp-Name header missing while the body has the value, or different
//     from it: 400, -32020.
//  7. a method the revision removed: 404, method not found (-32601).
func checkStateless(r *http.Request, m message, ver string) *ruleError {
	mismatch := func(format string, a ...any) *ruleError {
		return &ruleError{status: http.StatusBadRequest, code: codeHeaderMismatch, msg: fmt.Sprintf(format, a...)}
	}
	if ver == "" {
		return mismatch("%s header is required in protocol revision %s", headerProtocolVersion, versionStateless)
	}
	var p statelessParams
	_ = json.Unmarshal(m.raw, &p) // m parsed already; a wrong shape counts as absent
	var meta map[string]json.RawMessage
	if p.Params != nil {
		meta = p.Params.Meta
	}
	var missing []string
	for _, k := range []string{metaProtocolVersion, metaClientCapabilities} {
		if v, ok := meta[k]; !ok || string(v) == "null" {
			missing = append(missing, k)
		}
	}
	if meta == nil || len(missing) > 0 {
		what := "params._meta is missing"
		if meta != nil {
			what = "params._meta lacks " + strings.Join(missing, " and ")
		}
		return &ruleError{status: http.StatusBadRequest, code: codeInvalidParams,
			msg: "invalid params: " + what + " (required in protocol revision " + versionStateless + ")"}
	}
	if m.protocolVersion != ver {
		return mismatch("%s header %q does not match _meta %s %q", headerProtocolVersion, ver, metaProtocolVersion, m.protocolVersion)
	}
	if ver < versionStateless || !supported(ver) {
		return unsupportedVersion(ver)
	}
	hm, ok := headerValue(r, headerMethod)
	switch {
	case !ok:
		return mismatch("%s header is required", headerMethod)
	case hm != m.method:
		return mismatch("%s header %q does not match method %q", headerMethod, hm, m.method)
	}
	if field, body, ok := nameInBody(m.method, p); ok {
		hn, present := headerValue(r, headerName)
		switch {
		case !present:
			return mismatch("%s header is required for %s (params.%s is %q)", headerName, m.method, field, body)
		case hn != body:
			return mismatch("%s header %q does not match params.%s %q", headerName, hn, field, body)
		}
	}
	if slices.Contains(removedMethods, m.method) {
		return &ruleError{status: http.StatusNotFound, code: codeMethodNotFound,
			msg: fmt.Sprintf("method not found: %s was removed in protocol revision %s", m.method, versionStateless)}
	}
	return nil
}

// headerValue returns the header's value without surrounding whitespace,
// and whether the header is present at all.
func headerValue(r *http.Request, name string) (string, bool) {
	vs := r.Header.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return strings.TrimSpace(vs[0]), true
}

// nameInBody returns the params field that Mcp-Name mirrors for method, and
// its value, if the body has it as a string.
func nameInBody(method string, p statelessParams) (field, value string, ok bool) {
	if p.Params == nil {
		return "", "", false
	}
	var raw json.RawMessage
	switch method {
	case "tools/call", "prompts/get":
		field, raw = "name", p.Params.Name
	case "resources/read":
		field, raw = "uri", p.Params.URI
	case "tasks/get", "tasks/update", "tasks/cancel":
		field, raw = "taskId", p.Params.TaskID
	default:
		return "", "", false
	}
	if err := json.Unmarshal(raw, &value); err != nil {
		return "", "", false
	}
	return field, value, true
}
