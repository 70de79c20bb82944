// Package stdiorpc is the stdio transport of soda's own MCP servers
// (`sodactl sandbox mcp`, `soda-validated --transport stdio`): newline-
// delimited JSON-RPC on a reader and a writer, as the MCP stdio transport
// defines it, but one bad frame never ends the connection. A frame that is
// not JSON, not a JSON-RPC message, a batch, nested too deep, not UTF-8 or
// holding a lone UTF-16 surrogate, or longer than the frame limit, gets a
// JSON-RPC error response (id null where it has no usable id) and is
// skipped; the next frame is read as if nothing happened. An oversize
// frame is never buffered past the limit: the rest of its line is
// discarded as it arrives.
//
// Frames are checked on their raw bytes before any decoding (CheckFrame),
// because Go's encoding/json silently turns invalid UTF-8 and lone
// surrogates into U+FFFD: a server would otherwise act on, and attest,
// text the client never sent.
package stdiorpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of a Transport.
const (
	// DefaultMaxFrame is the longest frame read (the go-sdk's own limit).
	DefaultMaxFrame = 16 << 20
	// DefaultMaxDepth is the deepest nesting of arrays and objects in a
	// frame. MCP messages nest a few levels; tool arguments a few more.
	DefaultMaxDepth = 64
)

// Transport is an mcp.Transport over a reader and a writer (a server's
// stdin and stdout) that answers malformed frames and goes on.
type Transport struct {
	// Reader gives the frames; closed on Close when it is an io.Closer.
	Reader io.Reader
	// Writer takes the responses, one frame per Write.
	Writer io.Writer
	// MaxFrame bounds a frame in bytes (0: DefaultMaxFrame).
	MaxFrame int
	// MaxDepth bounds its nesting (0: DefaultMaxDepth).
	MaxDepth int
	// Log gets one line per refused frame (nil: none).
	Log *slog.Logger
}

// Connect implements mcp.Transport.
func (t *Transport) Connect(ctx context.Context) (mcp.Connection, error) {
	maxFrame, maxDepth := t.MaxFrame, t.MaxDepth
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	log := t.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &conn{r: t.Reader, w: t.Writer, log: log, maxFrame: maxFrame, maxDepth: maxDepth,
		incoming: make(chan readResult), closed: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type conn struct {
	r        io.Reader
	w        io.Writer
	log      *slog.Logger
	maxFrame int
	maxDepth int

	incoming chan readResult
	closed   chan struct{}
	once     sync.Once

	wmu sync.Mutex
}

// readLoop reads frames and hands the good ones to Read; bad ones are
// answered here. It ends at the reader's end or error, or on Close.
func (c *conn) readLoop() {
	br := bufio.NewReaderSize(c.r, 64<<10)
	var frame []byte
	for {
		var err error
		frame, err = c.readFrame(br, frame[:0])
		if errors.Is(err, errOversize) {
			c.refuse(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("frame of more than %d bytes: refused and skipped", c.maxFrame))
			continue
		}
		if len(frame) > 0 {
			if msg, ok := c.decode(frame); ok {
				select {
				case c.incoming <- readResult{msg: msg}:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			select {
			case c.incoming <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

var errOversize = errors.New("oversize frame")

// readFrame reads one line into buf, without its line end; past maxFrame
// it discards the rest of the line and returns errOversize.
func (c *conn) readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	over := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(chunk) > c.maxFrame+2 { // +2: the line end
				over, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && over:
			return nil, errOversize
		case err != nil:
			return bytes.TrimRight(buf, "\r\n"), err
		case over:
			return nil, errOversize
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if len(bytes.TrimSpace(buf)) == 0 {
			buf = buf[:0]
			continue // blank lines are no frames
		}
		if len(buf) > c.maxFrame {
			return nil, errOversize
		}
		return buf, nil
	}
}

// decode checks and decodes a frame, answering it when it is refused.
func (c *conn) decode(frame []byte) (jsonrpc.Message, bool) {
	if err := CheckFrame(frame, c.maxDepth); err != nil {
		code := int64(jsonrpc.CodeParseError)
		var fe *FrameError
		if errors.As(err, &fe) && fe.Invalid {
			code = jsonrpc.CodeInvalidRequest
		}
		c.refuse(nil, code, err.Error())
		return nil, false
	}
	trimmed := bytes.TrimLeft(frame, " \t")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		c.refuse(nil, jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported (MCP 2025-06-18 removed them): send one message per line")
		return nil, false
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		c.refuse(nil, jsonrpc.CodeInvalidRequest, "a JSON-RPC message is a JSON object")
		return nil, false
	}
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(frame, &probe)
	id := usableID(probe.ID)
	msg, err := jsonrpc.DecodeMessage(frame)
	if err != nil {
		c.refuse(id, jsonrpc.CodeInvalidRequest, "not a JSON-RPC 2.0 message: "+err.Error())
		return nil, false
	}
	return msg, true
}

// usableID returns a string or number id as it was sent, else nil (an
// error response then carries id null).
func usableID(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return raw
	}
	return nil
}

// refuse writes an error response for a frame that was not processed.
func (c *conn) refuse(id json.RawMessage, code int64, msg string) {
	c.log.Warn("refused a JSON-RPC frame", "code", code, "why", msg)
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: code, Message: msg}})
	_ = c.writeFrame(b)
}

func (c *conn) writeFrame(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return errors.New("stdiorpc: connection closed")
	default:
	}
	_, err := c.w.Write(append(b, '\n'))
	return err
}

// Read implements mcp.Connection.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write implements mcp.Connection.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("stdiorpc: encode: %w", err)
	}
	return c.writeFrame(b)
}

// Close implements mcp.Connection.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.wmu.Lock()
		close(c.closed)
		c.wmu.Unlock()
		if cl, ok := c.r.(io.Closer); ok {
			_ = cl.Close()
		}
	})
	return nil
}

// SessionID implements mcp.Connection: stdio has no session id.
func (c *conn) SessionID() string { return "" }

// FrameError says why a frame's raw bytes were refused.
type FrameError struct {
	// Offset is the byte where the problem was found.
	Offset int
	Reason string
	// Invalid marks JSON that parses but is not acceptable (too deep):
	// JSON-RPC's invalid request rather than a parse error.
	Invalid bool
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("byte %d: %s", e.Offset, e.Reason)
}

// CheckFrame checks one JSON text on its raw bytes: valid JSON, UTF-8
// throughout, no \u escape that is half of a UTF-16 surrogate pair, no
// number beyond a float64, and arrays and objects nested at most maxDepth
// deep. It returns a *FrameError.
func CheckFrame(b []byte, maxDepth int) error {
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return &FrameError{Offset: i, Reason: "not UTF-8 (a raw byte that is not part of a UTF-8 sequence)"}
	}
	if !json.Valid(b) {
		var se *json.SyntaxError
		var v any
		if err := json.Unmarshal(b, &v); errors.As(err, &se) {
			return &FrameError{Offset: int(se.Offset), Reason: "not JSON: " + se.Error()}
		}
		return &FrameError{Reason: "not JSON"}
	}
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		ch := b[i]
		if inString {
			switch ch {
			case '"':
				inString = false
			case '\\':
				if i+1 < len(b) && b[i+1] == 'u' {
					r, ok := hex4(b, i+2)
					if !ok {
						return &FrameError{Offset: i, Reason: "bad \\u escape"}
					}
					switch {
					case r >= 0xD800 && r <= 0xDBFF:
						if i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
							if lo, ok := hex4(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
								i += 11
								continue
							}
						}
						return &FrameError{Offset: i, Reason: "a lone UTF-16 high surrogate (\\u escape) in a string"}
					case r >= 0xDC00 && r <= 0xDFFF:
						return &FrameError{Offset: i, Reason: "a lone UTF-16 low surrogate (\\u escape) in a string"}
					}
					i += 5
				} else {
					i++
				}
			}
			continue
		}
		switch ch {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > maxDepth {
				return &FrameError{Offset: i, Reason: fmt.Sprintf("nested more than %d deep", maxDepth), Invalid: true}
			}
		case ']', '}':
			depth--
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			j := i + 1
			for j < len(b) && strings.IndexByte("0123456789.eE+-", b[j]) >= 0 {
				j++
			}
			// encoding/json refuses a number past a float64 when it
			// decodes into an interface or a float64: answer it here as
			// an invalid request rather than leave it to what decodes
			// the message next.
			if _, err := strconv.ParseFloat(string(b[i:j]), 64); err != nil {
				return &FrameError{Offset: i, Reason: "a number out of the range of a 64-bit float", Invalid: true}
			}
			i = j - 1
		}
	}
	return nil
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
