// Command mcpecho is a minimal, fast MCP server speaking newline-delimited
// JSON-RPC 2.0 over stdin/stdout. It exposes one tool, "echo", and is used as
// the child process in soda-mcpd's tests and benchmarks.
//
// Besides behaving well, it can misbehave on purpose so that the bridge's
// handling of bad children can be tested:
//
//	--exit-before-init   exit 3 right after reading the first line
//	--crash-on-call      tools/call "crash": write to stderr, exit 7, no answer
//	--hang-tool          tools/call "hang": never answer
//	--stderr-flood N     write N stderr lines at start, as fast as possible
//	--garbage            write a non-JSON line to stdout before every response
//	--spawn-grandchild   start "sleep 1000" (stdio to /dev/null) at start
//	--progress           tools/call "slow": 3 notifications/progress 20 ms
//	                     apart (with params._meta.progressToken), then a result
//	--notify             advertise tools/prompts listChanged and resource
//	                     subscriptions; resources/subscribe and unsubscribe
//	                     keep a set of URIs; tools/call "notify" sends
//	                     tools and prompts list_changed, a log message and
//	                     resources/updated for each subscribed URI, then
//	                     answers with the subscribed URIs
//
// It exits 0 when stdin reaches EOF.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// latestProtocol is answered when the client asks for a version we don't know.
const latestProtocol = "2025-11-25"

// supportedProtocols are echoed back to the client as-is.
var supportedProtocols = map[string]bool{
	"2024-11-05": true,
	"2025-03-26": true,
	"2025-06-18": true,
	"2025-11-25": true,
}

// JSON-RPC error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

// options selects the (mis)behaviours of the server.
type options struct {
	exitBeforeInit  bool
	crashOnCall     bool
	hangTool        bool
	stderrFlood     int
	garbage         bool
	spawnGrandchild bool
	progress        bool
	progressDelay   time.Duration
	notify          bool
}

// server handles one line at a time; writes to out are serialised by mu so
// that the progress goroutine may write too.
type server struct {
	opts   options
	mu     sync.Mutex
	out    *bufio.Writer
	stderr io.Writer
	exit   func(code int)
	lines  int
	wg     sync.WaitGroup
	// subscribed are the URIs of resources/subscribe (--notify).
	subscribed map[string]bool
}

// request is an incoming JSON-RPC message (request, notification or response).
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

var nullID = json.RawMessage("null")

// echoTool is the only tool listed by tools/list.
var echoTool = map[string]any{
	"name":        "echo",
	"description": "Echoes back the given text.",
	"inputSchema": map[string]any{
		"type": "object",
		"properties": map[string]any{
			"text": map[string]any{"type": "string"},
		},
	},
}

func main() {
	var o options
	flag.BoolVar(&o.exitBeforeInit, "exit-before-init", false, "exit 3 right after reading the first line")
	flag.BoolVar(&o.crashOnCall, "crash-on-call", false, `tools/call "crash" writes to stderr and exits 7 without answering`)
	flag.BoolVar(&o.hangTool, "hang-tool", false, `tools/call "hang" never answers`)
	flag.IntVar(&o.stderrFlood, "stderr-flood", 0, "write `N` lines to stderr at start")
	flag.BoolVar(&o.garbage, "garbage", false, "write a non-JSON line to stdout before every response")
	flag.BoolVar(&o.spawnGrandchild, "spawn-grandchild", false, `spawn "sleep 1000" at start`)
	flag.BoolVar(&o.progress, "progress", false, `tools/call "slow" sends 3 progress notifications 20ms apart`)
	flag.BoolVar(&o.notify, "notify", false, `list_changed and resource subscriptions; tools/call "notify" sends notifications`)
	httpAddr := flag.String("http", "", "serve MCP over HTTP on loopback `ADDR` itself, no bridge (the benchmark's floor)")
	flag.Parse()
	o.progressDelay = 20 * time.Millisecond

	if *httpAddr != "" {
		if err := serveHTTP(o, *httpAddr); err != nil {
			fmt.Fprintf(os.Stderr, "mcpecho: %v\n", err)
			os.Exit(1)
		}
		return
	}

	if err := run(o, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "mcpecho: %v\n", err)
		os.Exit(1)
	}
}

// run serves MCP on in/out until in reaches EOF.
func run(o options, in io.Reader, out, stderr io.Writer) error {
	if o.stderrFlood > 0 {
		if err := flood(stderr, o.stderrFlood); err != nil {
			return fmt.Errorf("stderr flood: %w", err)
		}
	}
	if o.spawnGrandchild {
		cmd := exec.Command("sleep", "1000")
		// Stdin/Stdout/Stderr nil: the grandchild gets /dev/null and inherits
		// none of our pipes; it stays in our process group and cgroup.
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("spawn grandchild: %w", err)
		}
		fmt.Fprintf(stderr, "mcpecho: grandchild pid %d\n", cmd.Process.Pid)
		_ = cmd.Process.Release()
	}
	s := &server{
		opts:   o,
		out:    bufio.NewWriterSize(out, 64<<10),
		stderr: stderr,
		exit:   os.Exit,
	}
	err := s.serve(in)
	s.wg.Wait()
	return err
}

// flood writes n stderr lines as fast as possible.
func flood(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for i := 1; i <= n; i++ {
		bw.WriteString("mcpecho: stderr flood line ")
		bw.WriteString(strconv.Itoa(i))
		bw.WriteString(" of ")
		bw.WriteString(strconv.Itoa(n))
		if err := bw.WriteByte('\n'); err != nil {
			return fmt.Errorf("write line %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// serve reads newline-delimited messages from in and answers them.
func (s *server) serve(in io.Reader) error {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			s.handleLine(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
}

// handleLine handles one raw input line (a message or a batch).
func (s *server) handleLine(line []byte) {
	s.lines++
	if s.opts.exitBeforeInit && s.lines == 1 {
		s.exit(3)
		return
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if line[0] == '[' {
		s.handleBatch(line)
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		s.send(response{JSONRPC: "2.0", ID: nullID, Error: &rpcError{Code: codeParseError, Message: "parse error: " + err.Error()}})
		return
	}
	if resp, ok := s.handle(&req); ok {
		s.send(resp)
	}
}

// handleBatch answers a JSON-RPC batch with an array of the responses.
func (s *server) handleBatch(line []byte) {
	var reqs []request
	if err := json.Unmarshal(line, &reqs); err != nil {
		s.send(response{JSONRPC: "2.0", ID: nullID, Error: &rpcError{Code: codeParseError, Message: "parse error: " + err.Error()}})
		return
	}
	if len(reqs) == 0 {
		s.send(response{JSONRPC: "2.0", ID: nullID, Error: &rpcError{Code: codeInvalidRequest, Message: "empty batch"}})
		return
	}
	var out []response
	for i := range reqs {
		if resp, ok := s.handle(&reqs[i]); ok {
			out = append(out, resp)
		}
	}
	if len(out) > 0 {
		s.send(out)
	}
}

// handle returns the response to req, and false when none is due now
// (notifications, responses, and calls answered later or never).
func (s *server) handle(req *request) (response, bool) {
	isRequest := len(req.ID) > 0 && !bytes.Equal(req.ID, nullID)
	if req.Method == "" {
		// A response to something we never asked: ignore it.
		if !isRequest || len(req.Result) > 0 || len(req.Error) > 0 {
			return response{}, false
		}
		return errResp(req.ID, codeInvalidRequest, "missing method"), true
	}
	if !isRequest {
		return response{}, false // notifications/initialized, cancelled, ...
	}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		v := latestProtocol
		if supportedProtocols[p.ProtocolVersion] {
			v = p.ProtocolVersion
		}
		caps := map[string]any{"tools": map[string]any{}}
		if s.opts.notify {
			caps = map[string]any{
				"tools":     map[string]any{"listChanged": true},
				"prompts":   map[string]any{"listChanged": true},
				"resources": map[string]any{"subscribe": true},
			}
		}
		return okResp(req.ID, map[string]any{
			"protocolVersion": v,
			"capabilities":    caps,
			"serverInfo":      map[string]any{"name": "mcpecho", "version": "1.0.0"},
		}), true
	case "ping":
		return okResp(req.ID, struct{}{}), true
	case "tools/list":
		return okResp(req.ID, map[string]any{"tools": []any{echoTool}}), true
	case "tools/call":
		return s.toolsCall(req)
	case "resources/subscribe", "resources/unsubscribe":
		if !s.opts.notify {
			break
		}
		var p struct {
			URI string `json:"uri"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if s.subscribed == nil {
			s.subscribed = map[string]bool{}
		}
		if req.Method == "resources/subscribe" {
			s.subscribed[p.URI] = true
		} else {
			delete(s.subscribed, p.URI)
		}
		return okResp(req.ID, struct{}{}), true
	}
	return errResp(req.ID, codeMethodNotFound, "method not found: "+req.Method), true
}

// notifyAll sends the notifications of tools/call "notify" and returns the
// subscribed URIs, sorted, comma-separated.
func (s *server) notifyAll() string {
	for _, m := range []string{"notifications/tools/list_changed", "notifications/prompts/list_changed"} {
		s.send(notification{JSONRPC: "2.0", Method: m})
	}
	s.send(notification{JSONRPC: "2.0", Method: "notifications/message", Params: map[string]any{"level": "info", "data": "notify called"}})
	uris := make([]string, 0, len(s.subscribed))
	for u := range s.subscribed {
		uris = append(uris, u)
	}
	slices.Sort(uris)
	for _, u := range uris {
		s.send(notification{JSONRPC: "2.0", Method: "notifications/resources/updated", Params: map[string]any{"uri": u}})
	}
	return strings.Join(uris, ",")
}

// toolsCall implements tools/call for echo and the misbehaving tools.
func (s *server) toolsCall(req *request) (response, bool) {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Text string `json:"text"`
		} `json:"arguments"`
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return errResp(req.ID, codeInvalidParams, "invalid params: "+err.Error()), true
	}
	switch {
	case p.Name == "echo":
		return okResp(req.ID, textResult(p.Arguments.Text)), true
	case p.Name == "notify" && s.opts.notify:
		return okResp(req.ID, textResult("subscribed: "+s.notifyAll())), true
	case p.Name == "crash" && s.opts.crashOnCall:
		s.mu.Lock()
		_ = s.out.Flush()
		s.mu.Unlock()
		fmt.Fprintln(s.stderr, "mcpecho: crashing on purpose (tools/call crash)")
		s.exit(7)
		return response{}, false
	case p.Name == "hang" && s.opts.hangTool:
		return response{}, false
	case p.Name == "slow" && s.opts.progress:
		id := append(json.RawMessage(nil), req.ID...)
		tok := p.Meta.ProgressToken
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for i := 1; i <= 3; i++ {
				time.Sleep(s.opts.progressDelay)
				if len(tok) > 0 {
					s.send(notification{JSONRPC: "2.0", Method: "notifications/progress", Params: map[string]any{
						"progressToken": tok,
						"progress":      i,
						"total":         3,
						"message":       fmt.Sprintf("step %d of 3", i),
					}})
				}
			}
			s.send(okResp(id, textResult("slow done")))
		}()
		return response{}, false
	default:
		return errResp(req.ID, codeInvalidParams, "unknown tool: "+p.Name), true
	}
}

func textResult(text string) map[string]any {
	return map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}
}

func okResp(id json.RawMessage, result any) response {
	return response{JSONRPC: "2.0", ID: id, Result: result}
}

func errResp(id json.RawMessage, code int, msg string) response {
	return response{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: msg}}
}

// send writes v as one JSON line (preceded by garbage if asked) and flushes.
func (s *server) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(s.stderr, "mcpecho: marshal response: %v\n", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.garbage {
		s.out.WriteString("garbage!!! this is not JSON\n")
	}
	s.out.Write(b)
	s.out.WriteByte('\n')
	if err := s.out.Flush(); err != nil {
		fmt.Fprintf(s.stderr, "mcpecho: write stdout: %v\n", err)
	}
}

// serveHTTP answers MCP Streamable HTTP POSTs in-process with the same
// handler: what an HTTP MCP server costs with no bridge and no child, the
// floor against which a bridge's added latency is read.
func serveHTTP(o options, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
			return
		case http.MethodPost:
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var out bytes.Buffer
		s := &server{opts: o, out: bufio.NewWriter(&out), stderr: io.Discard, exit: func(int) {}}
		s.handleLine(append(bytes.TrimSpace(body), '\n'))
		s.wg.Wait()
		s.out.Flush()
		resp := bytes.TrimSpace(out.Bytes())
		if len(resp) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "direct")
		w.Write(resp)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if !l.Addr().(*net.TCPAddr).IP.IsLoopback() {
		l.Close()
		return fmt.Errorf("refusing non-loopback address %s", addr)
	}
	fmt.Fprintf(os.Stderr, "mcpecho: serving http://%s/mcp\n", l.Addr())
	return http.Serve(l, mux)
}
