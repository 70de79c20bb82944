package llmgateway

import (
	"bytes"
	"encoding/json"
	"mime"
)

// Usage is the tokens a provider reported for one response or, summed, for
// a run.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_tokens,omitempty"`
	CacheWrite int64 `json:"cache_write_tokens,omitempty"`
}

// Total is every token of u: what a budget counts.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, Output: u.Output + v.Output,
		CacheRead: u.CacheRead + v.CacheRead, CacheWrite: u.CacheWrite + v.CacheWrite}
}

// Kinds are the names of Usage's fields as metrics' kind label values.
var kinds = [...]string{"input", "output", "cache_read", "cache_write"}

func (u Usage) byKind() [4]int64 { return [4]int64{u.Input, u.Output, u.CacheRead, u.CacheWrite} }

// Bounds of what the meter reads: a JSON response is decoded only if it
// fits maxJSON; an event-stream line longer than maxLine is skipped. A
// model's JSON reply is its whole answer at once (64k output tokens are
// about 256 KiB), so 4 MiB leaves room; with Config.MaxConcurrent (32)
// requests in flight the meters of one sandbox hold at most 128 MiB.
const (
	maxJSON = 4 << 20
	maxLine = 1 << 20
	// maxTokens bounds one reported count: an upstream's nonsense must
	// not overflow a sum.
	maxTokens = 1 << 40
)

// meter reads the usage out of a response body as it streams by: each
// data line of an event stream (Anthropic's message_start and cumulative
// message_delta, OpenAI's final chunk or response.completed), or the whole
// of a JSON body. It never holds more than maxJSON or maxLine bytes.
type meter struct {
	sse   bool
	buf   bytes.Buffer
	over  bool // the JSON body or the current line outgrew its bound
	usage usageFields
}

// newMeter returns a meter for a response of contentType, or nil for one
// that carries no usage.
func newMeter(contentType string) *meter {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "text/event-stream":
		return &meter{sse: true}
	case "application/json":
		return &meter{}
	}
	return nil
}

// Write takes the next bytes of the body; it never fails.
func (m *meter) Write(p []byte) (int, error) {
	n := len(p)
	if !m.sse {
		if !m.over && m.buf.Len()+len(p) <= maxJSON {
			m.buf.Write(p)
		} else if !m.over {
			m.over = true
			m.buf = bytes.Buffer{} // let the memory go, not only the bytes
		}
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !m.over && m.buf.Len()+len(chunk) <= maxLine {
			m.buf.Write(chunk)
		} else {
			m.over = true
			m.buf.Reset()
		}
		if i < 0 {
			break
		}
		if !m.over {
			m.line(m.buf.Bytes())
		}
		m.buf.Reset()
		m.over = false
		p = p[i+1:]
	}
	return n, nil
}

// line reads one line of an event stream.
func (m *meter) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	m.object(bytes.TrimSpace(data))
}

// object reads the usage of one JSON object, where the providers put it.
func (m *meter) object(data []byte) {
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var env struct {
		Usage   *usageFields `json:"usage"`
		Message *struct {
			Usage *usageFields `json:"usage"`
		} `json:"message"`
		Response *struct {
			Usage *usageFields `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &env) != nil {
		return
	}
	for _, u := range []*usageFields{env.Usage, msgUsage(env.Message), msgUsage(env.Response)} {
		if u != nil {
			m.usage.merge(u)
		}
	}
}

func msgUsage(v *struct {
	Usage *usageFields `json:"usage"`
}) *usageFields {
	if v == nil {
		return nil
	}
	return v.Usage
}

// Usage is what the body reported, once it has all been written.
func (m *meter) Usage() Usage {
	if !m.sse && !m.over && m.buf.Len() > 0 {
		m.object(bytes.TrimSpace(m.buf.Bytes()))
		m.buf.Reset()
	}
	return m.usage.usage()
}

// usageFields is a usage object as Anthropic's and OpenAI's APIs write
// it. A field seen again replaces the value before it: Anthropic's
// message_delta carries cumulative counts.
type usageFields struct {
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	CacheCreation    *int64 `json:"cache_creation_input_tokens"`
	CacheRead        *int64 `json:"cache_read_input_tokens"`
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	PromptDetails    *struct {
		Cached *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputDetails *struct {
		Cached *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// openai says the counts are OpenAI's, whose input includes the
	// cached tokens.
	openai bool
}

func (f *usageFields) merge(o *usageFields) {
	set := func(dst **int64, v *int64) {
		if v != nil {
			x := min(max(*v, 0), maxTokens)
			*dst = &x
		}
	}
	set(&f.InputTokens, o.InputTokens)
	set(&f.OutputTokens, o.OutputTokens)
	set(&f.CacheCreation, o.CacheCreation)
	set(&f.CacheRead, o.CacheRead)
	if o.PromptTokens != nil || o.CompletionTokens != nil || o.PromptDetails != nil || o.InputDetails != nil {
		f.openai = true
	}
	set(&f.InputTokens, o.PromptTokens)
	set(&f.OutputTokens, o.CompletionTokens)
	if o.PromptDetails != nil {
		set(&f.CacheRead, o.PromptDetails.Cached)
	}
	if o.InputDetails != nil {
		set(&f.CacheRead, o.InputDetails.Cached)
	}
}

func (f *usageFields) usage() Usage {
	get := func(v *int64) int64 {
		if v == nil {
			return 0
		}
		return *v
	}
	u := Usage{Input: get(f.InputTokens), Output: get(f.OutputTokens), CacheRead: get(f.CacheRead), CacheWrite: get(f.CacheCreation)}
	if f.openai {
		// OpenAI's input counts its cached tokens too.
		u.Input = max(u.Input-u.CacheRead, 0)
	}
	return u
}
