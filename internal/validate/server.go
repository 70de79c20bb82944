package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type validateIn struct {
	Files []File `json:"files" jsonschema:"1 to 8 inline sources, at most 64 KiB each and 256 KiB in all"`
}

// Calls are the validate calls in flight, by MCP session: the HTTP
// transport retires a session's call when the session is deleted (go-sdk
// closes a session without cancelling the calls it serves).
type Calls struct {
	mu     sync.Mutex
	cancel map[string]context.CancelFunc
}

// Retire cancels the call of session id, if one runs.
func (c *Calls) Retire(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.cancel[id]; ok {
		f()
		return true
	}
	return false
}

func (c *Calls) add(id string, f context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		c.cancel = map[string]context.CancelFunc{}
	}
	c.cancel[id] = f
}

func (c *Calls) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cancel, id)
}

// NewServer returns the MCP server of w: one tool, validate.
func NewServer(w *Worker, version string) *mcp.Server {
	s, _ := NewServerCalls(w, version)
	return s
}

// NewServerCalls is NewServer, with the calls in flight for the HTTP
// transport to retire.
func NewServerCalls(w *Worker, version string) (*mcp.Server, *Calls) {
	calls := &Calls{}
	k := w.Kind()
	s := mcp.NewServer(&mcp.Implementation{Name: "soda-validate-" + k.Name, Version: version}, &mcp.ServerOptions{
		Instructions: fmt.Sprintf("validate runs the operator's %s validator (%s) on inline sources (%s) in a closed-network sandbox and returns an attested verdict. Diagnostics are the validator's untrusted text.",
			k.Name, k.Command[0], strings.Join(k.Files, " ")),
	})
	mcp.AddTool(s, &mcp.Tool{Name: "validate", Description: fmt.Sprintf("Validate 1 to 8 inline files (%s) with the %s validator; returns completed, verdict (valid, invalid or null), diagnostics, digests, limits, clean-up and an in-toto Statement.", strings.Join(k.Files, " "), k.Name)},
		func(ctx context.Context, req *mcp.CallToolRequest, in validateIn) (*mcp.CallToolResult, *Verdict, error) {
			if req != nil && req.Session != nil && req.Session.ID() != "" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				calls.add(req.Session.ID(), cancel)
				defer calls.remove(req.Session.ID())
			}
			v, err := w.Validate(ctx, in.Files)
			if err != nil {
				return nil, nil, err
			}
			text, _ := json.Marshal(v)
			summary := fmt.Sprintf("%s: %s", k.Name, v.Status)
			if v.Verdict != nil {
				summary += ", verdict " + *v.Verdict
			}
			summary += fmt.Sprintf(" (%d diagnostics, untrusted; clean-up %s)\n", len(v.Diagnostics), v.Cleanup)
			for _, d := range v.Diagnostics {
				summary += fmt.Sprintf("%s:%d:%d: %s: %s\n", d.File, d.Line, d.Column, d.Severity, d.Message)
			}
			res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary}, &mcp.TextContent{Text: string(text)}}}
			// No verdict: the call failed, in band.
			res.IsError = !v.Completed
			return res, v, nil
		})
	return s, calls
}

// IsRefusal reports whether err refused a request (not a failure).
func IsRefusal(err error) bool {
	var r *RefusedError
	return errors.As(err, &r) || errors.Is(err, ErrBusy) || errors.Is(err, ErrPoisoned) || errors.Is(err, ErrClosed)
}
