package keystest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/soda-project/soda/test/testkit"
)

// The fake OpenAI API's answer and the tokens it reports for each
// model request.
const (
	oaAnswer    = "soda-openai-answer-3f9d"
	oaInTokens  = 23
	oaOutTokens = 11
)

// fakeOpenAI is a loopback HTTPS server speaking what OpenAI's clients
// use of its API: the Responses API (POST /v1/responses, an event stream
// or JSON; Codex, and the AI SDK's openai provider that OpenCode uses),
// Chat Completions (POST /v1/chat/completions, chunks and a last usage
// chunk) and the model list. Every request must carry the real key as
// a bearer token; each is recorded.
type fakeOpenAI struct {
	url string
	mu  sync.Mutex
	// reqs are the requests that reached it, in order.
	reqs []oaRequest
}

type oaRequest struct {
	method, path, auth string
	upgrade            string
	stream             bool
	model              string
}

// isModel says whether r asked the model (and so was answered with usage).
func (r oaRequest) isModel() bool {
	return r.method == http.MethodPost && (strings.HasSuffix(r.path, "/responses") || strings.HasSuffix(r.path, "/chat/completions"))
}

func startOpenAI(t *testing.T, cert tls.Certificate, key string) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		var req struct {
			Stream bool   `json:"stream"`
			Model  string `json:"model"`
		}
		_ = json.Unmarshal(body, &req)
		f.mu.Lock()
		f.reqs = append(f.reqs, oaRequest{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"), upgrade: r.Header.Get("Upgrade"), stream: req.Stream, model: req.Model})
		f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		if req.Model == "" {
			req.Model = "gpt-5"
		}
		switch {
		case r.Header.Get("Upgrade") != "":
			// Codex asks for the Responses API over a WebSocket first;
			// the gateway is to refuse it, never to pass it on.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUpgradeRequired)
			fmt.Fprint(w, `{"error":{"message":"fake: no WebSocket","type":"invalid_request_error","param":null,"code":null}}`)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/responses"):
			oaResponses(w, req.Model, req.Stream)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/chat/completions"):
			oaChat(w, req.Model, req.Stream)
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/v1/models"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"object":"list","data":[{"id":"gpt-5","object":"model","created":1700000000,"owned_by":"openai"}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"message":"fake: no %s %s","type":"invalid_request_error","param":null,"code":null}}`, r.Method, r.URL.Path)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	f.url = "https://" + ln.Addr().String()
	return f
}

// oaResponses answers a Responses API request: one assistant message
// with the answer; usage in response.completed.
func oaResponses(w http.ResponseWriter, model string, stream bool) {
	msg := func(status string, text bool) string {
		content := "[]"
		if text {
			content = fmt.Sprintf(`[{"type":"output_text","text":%q,"annotations":[],"logprobs":[]}]`, oaAnswer)
		}
		return fmt.Sprintf(`{"id":"msg_soda1","type":"message","status":%q,"role":"assistant","content":%s}`, status, content)
	}
	resp := func(status, output, usage string) string {
		return fmt.Sprintf(`{"id":"resp_soda1","object":"response","created_at":1700000000,"status":%q,"model":%q,"output":%s,"usage":%s,"error":null,"incomplete_details":null}`,
			status, model, output, usage)
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		oaInTokens, oaOutTokens, oaInTokens+oaOutTokens)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, resp("completed", "["+msg("completed", true)+"]", usage))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	seq := 0
	ev := func(typ, rest string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, rest)
		seq++
		fl.Flush()
	}
	ev("response.created", `"response":`+resp("in_progress", "[]", "null"))
	ev("response.in_progress", `"response":`+resp("in_progress", "[]", "null"))
	ev("response.output_item.added", `"output_index":0,"item":`+msg("in_progress", false))
	ev("response.content_part.added", `"item_id":"msg_soda1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`)
	ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_soda1","output_index":0,"content_index":0,"delta":%q,"logprobs":[]`, oaAnswer))
	ev("response.output_text.done", fmt.Sprintf(`"item_id":"msg_soda1","output_index":0,"content_index":0,"text":%q,"logprobs":[]`, oaAnswer))
	ev("response.content_part.done", fmt.Sprintf(`"item_id":"msg_soda1","output_index":0,"content_index":0,"part":{"type":"output_text","text":%q,"annotations":[]}`, oaAnswer))
	ev("response.output_item.done", `"output_index":0,"item":`+msg("completed", true))
	ev("response.completed", `"response":`+resp("completed", "["+msg("completed", true)+"]", usage))
}

// oaChat answers a Chat Completions request; a stream ends with the
// usage chunk (stream_options.include_usage) and [DONE].
func oaChat(w http.ResponseWriter, model string, stream bool) {
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}`,
		oaInTokens, oaOutTokens, oaInTokens+oaOutTokens)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-soda1","object":"chat.completion","created":1700000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":%s}`,
			model, oaAnswer, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	chunk := func(choices, usage string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-soda1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":%q,\"choices\":%s,\"usage\":%s}\n\n", model, choices, usage)
		fl.Flush()
	}
	chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "null")
	chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, oaAnswer), "null")
	chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "null")
	chunk(`[]`, usage)
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

func (f *fakeOpenAI) seen() []oaRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]oaRequest(nil), f.reqs...)
}

// setupOpenAI is setup with a fake OpenAI upstream and its real key in
// sodactl's environment (OPENAI_API_KEY).
func setupOpenAI(t *testing.T) (*env, *fakeOpenAI, string) {
	t.Helper()
	e := setup(t)
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	key := "sk-proj-real-" + hex.EncodeToString(b)
	e.hostEnv = append(e.hostEnv, "OPENAI_API_KEY="+key)
	return e, startOpenAI(t, e.cert, key), key
}

// agentsCLI installs the pinned Codex and OpenCode CLIs
// (test/sandbox/agents) unless they are installed and as new as the lock
// file, and returns the directory. npm install, as the sandbox tests do:
// the lock file lacks other platforms' optional opencode packages, which
// npm ci would ask for.
func agentsCLI(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../sandbox/agents")
	if err != nil {
		t.Fatal(err)
	}
	lock, lerr := os.Stat(filepath.Join(dir, "package-lock.json"))
	inst, ierr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if lerr != nil || ierr != nil || inst.ModTime().Before(lock.ModTime()) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			testkit.SkipHostLacks(t, "npm, to install test/sandbox/agents: %v", err)
		}
		if out, err := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput(); err != nil {
			testkit.SkipHostLacks(t, "the pinned agent CLIs: npm install --prefix %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// checkOpenAIRun checks what a CLI's run through the gateway left: the
// answer printed, every request at the upstream with the real key and
// none a WebSocket, at least one model request, and the audit trail with
// each forwarded request and the upstream's tokens for each; a record of
// a request the gateway answered itself must be a refused WebSocket.
func checkOpenAIRun(t *testing.T, name string, f *fakeOpenAI, key, audit, stdout, stderr string, code int) {
	t.Helper()
	if code != 0 || !strings.Contains(stdout, oaAnswer) {
		t.Fatalf("%s through the gateway: exit %d\nstdout: %s\nstderr: %s\nupstream saw: %v", name, code, stdout, stderr, f.seen())
	}
	reqs := f.seen()
	models := 0
	var paths []string
	for i, r := range reqs {
		paths = append(paths, r.method+" "+r.path)
		if r.auth != "Bearer "+key {
			t.Errorf("request %d (%s %s) reached the upstream with Authorization %q, not the real key", i, r.method, r.path, r.auth)
		}
		if r.upgrade != "" {
			t.Errorf("request %d (%s %s): the gateway passed on an upgrade to %q", i, r.method, r.path, r.upgrade)
		}
		if r.isModel() {
			models++
		}
	}
	if models == 0 {
		t.Fatalf("no model request reached the upstream (%v)", paths)
	}
	recs := llmRecords(t, audit)
	var in, out float64
	forwarded, refused := 0, 0
	for _, r := range recs {
		if r["provider"] != "openai" {
			t.Errorf("audit record %v", r)
		}
		if msg, _ := r["refused"].(string); msg != "" {
			refused++
			if r["status"].(float64) != http.StatusUpgradeRequired || !strings.Contains(msg, "WebSocket") {
				t.Errorf("refused: %v", r)
			}
			continue
		}
		forwarded++
		u, _ := r["usage"].(map[string]any)
		in += u["input_tokens"].(float64)
		out += u["output_tokens"].(float64)
		if r["status"].(float64) != 200 {
			t.Errorf("audit record %v", r)
		}
	}
	t.Logf("%s printed %q; the upstream got %d requests (%v), %d of them model requests; %d WebSocket upgrades refused", name, lastLine(stdout), len(reqs), paths, models, refused)
	if forwarded != len(reqs) {
		t.Errorf("%d llm audit records of forwarded requests for %d requests", forwarded, len(reqs))
	}
	if in != float64(models*oaInTokens) || out != float64(models*oaOutTokens) {
		t.Errorf("audited tokens %v in, %v out; the upstream reported %d, %d for %d model requests", in, out, models*oaInTokens, models*oaOutTokens, models)
	}
	if want := fmt.Sprintf("model usage: %d input, %d output tokens", models*oaInTokens, models*oaOutTokens); !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q: %s", want, stderr)
	}
	if b, _ := os.ReadFile(audit); strings.Contains(string(b), key) {
		t.Error("the audit file holds the real key")
	}
	if strings.Contains(stdout, key) || strings.Contains(stderr, key) {
		t.Error("the real key was printed")
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestCodexThroughGateway: the real Codex CLI (codex exec), given only
// the placeholder, gets its answer from the upstream, which saw the real
// key. Codex 0.169 needs two things the Claude test does not:
//
//   - its key in CODEX_API_KEY (codex exec sends no key for
//     OPENAI_API_KEY alone): the gateway sets that variable too;
//   - its base URL from its configuration, openai_base_url (it ignores
//     OPENAI_BASE_URL and goes to api.openai.com): sodactl run gives a
//     codex command -c openai_base_url="URL" (hostkeys), which this test
//     does not.
//
// It asks for the Responses API over a WebSocket first; the gateway
// refuses that with 426 and Codex goes on over HTTP with an event stream.
func TestCodexThroughGateway(t *testing.T) {
	e, f, key := setupOpenAI(t)
	agents := agentsCLI(t)
	codex := filepath.Join(agents, "node_modules", ".bin", "codex")
	if out, err := exec.Command(codex, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "codex-cli") {
		testkit.SkipHostLacks(t, "a Codex CLI that runs: codex --version on the host: %v %s", err, out)
	}
	audit := filepath.Join(e.bin, "codex.jsonl")
	stdout, stderr, code := e.run(t, "--llm", "openai="+f.url, "--upstream-ca", e.caFile, "--ro", agents, "--audit-json", audit,
		"--", codex, "exec", "--skip-git-repo-check", "Say the magic word.")
	checkOpenAIRun(t, "codex exec", f, key, audit, stdout, stderr, code)
}

// TestOpenCodeThroughGateway: the real OpenCode CLI (opencode run) with
// OpenAI's model needs nothing but the variables the gateway sets
// (OPENAI_BASE_URL, OPENAI_API_KEY); it uses the Responses API with an
// event stream, for the answer and for the session's title.
func TestOpenCodeThroughGateway(t *testing.T) {
	e, f, key := setupOpenAI(t)
	agents := agentsCLI(t)
	opencode := filepath.Join(agents, "node_modules", ".bin", "opencode")
	if out, err := exec.Command(opencode, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "1.") {
		testkit.SkipHostLacks(t, "an OpenCode CLI that runs: opencode --version on the host: %v %s", err, out)
	}
	audit := filepath.Join(e.bin, "opencode.jsonl")
	stdout, stderr, code := e.run(t, "--llm", "openai="+f.url, "--upstream-ca", e.caFile, "--ro", agents, "--audit-json", audit,
		"--", opencode, "run", "--model", "openai/gpt-5", "Say the magic word.")
	checkOpenAIRun(t, "opencode run", f, key, audit, stdout, stderr, code)
}
