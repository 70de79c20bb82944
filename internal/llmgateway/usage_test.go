package llmgateway

import (
	"strings"
	"testing"
)

func TestMeter(t *testing.T) {
	for _, tc := range []struct {
		name, ctype, body string
		want              Usage
	}{
		{
			name:  "anthropic stream: message_delta is cumulative",
			ctype: "text/event-stream",
			body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1,\"cache_read_input_tokens\":7,\"cache_creation_input_tokens\":3}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
				"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":10}}\r\n\r\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			want: Usage{Input: 25, Output: 15, CacheRead: 7, CacheWrite: 3},
		},
		{
			name:  "anthropic json",
			ctype: "application/json",
			body:  `{"id":"msg_1","type":"message","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":12,"output_tokens":4}}`,
			want:  Usage{Input: 12, Output: 4},
		},
		{
			name:  "openai chat stream with include_usage",
			ctype: "text/event-stream; charset=utf-8",
			body: "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":10}}}\n\n" +
				"data: [DONE]\n\n",
			want: Usage{Input: 20, Output: 5, CacheRead: 10},
		},
		{
			name:  "openai responses stream",
			ctype: "text/event-stream",
			body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":8,\"input_tokens_details\":{\"cached_tokens\":0}}}}\n\n",
			want: Usage{Input: 40, Output: 8},
		},
		{
			name:  "openai json",
			ctype: "application/json",
			body:  `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
			want:  Usage{Input: 9, Output: 2},
		},
		{name: "no usage", ctype: "application/json", body: `{"ok":true}`},
		{name: "not json", ctype: "application/json", body: `<html>`},
		{name: "negative and huge counts are bounded", ctype: "application/json",
			body: `{"usage":{"input_tokens":-5,"output_tokens":99999999999999999}}`, want: Usage{Output: maxTokens}},
		{name: "a JSON body of the bound is read", ctype: "application/json",
			body: `{"usage":{"input_tokens":2},"x":"` + strings.Repeat("a", maxJSON-len(`{"usage":{"input_tokens":2},"x":""}`)) + `"}`,
			want: Usage{Input: 2}},
		{name: "a JSON body over the bound is not held", ctype: "application/json",
			body: `{"usage":{"input_tokens":2},"x":"` + strings.Repeat("a", maxJSON) + `"}`},
		{name: "an oversize line is skipped, the next one read", ctype: "text/event-stream",
			body: "data: {\"usage\":{\"input_tokens\":1,\"x\":\"" + strings.Repeat("a", maxLine) + "\"}}\n" +
				"data: {\"usage\":{\"output_tokens\":3}}\n",
			want: Usage{Output: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fed in awkward pieces: lines split across writes.
			for _, step := range []int{1, 7, 4096, len(tc.body) + 1} {
				m := newMeter(tc.ctype)
				for b := tc.body; len(b) > 0; {
					n := min(step, len(b))
					_, _ = m.Write([]byte(b[:n]))
					b = b[n:]
				}
				if got := m.Usage(); got != tc.want {
					t.Fatalf("in pieces of %d: usage %+v, want %+v", step, got, tc.want)
				}
				if c := m.buf.Cap(); c > max(maxJSON, maxLine) {
					t.Fatalf("in pieces of %d: the meter holds %d bytes, over its bound", step, c)
				}
			}
		})
	}
	if newMeter("text/plain") != nil {
		t.Error("a text/plain response got a meter")
	}
}

func FuzzMeter(f *testing.F) {
	f.Add("text/event-stream", []byte("data: {\"usage\":{\"input_tokens\":1}}\n"), 3)
	f.Add("application/json", []byte(`{"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":5}}}`), 1)
	f.Fuzz(func(t *testing.T, ctype string, body []byte, step int) {
		m := newMeter(ctype)
		if m == nil {
			return
		}
		step = max(1, step%64+1)
		for len(body) > 0 {
			n := min(step, len(body))
			_, _ = m.Write(body[:n])
			body = body[n:]
		}
		u := m.Usage()
		for i, n := range u.byKind() {
			if n < 0 || n > maxTokens {
				t.Fatalf("%s: %d", kinds[i], n)
			}
		}
	})
}
