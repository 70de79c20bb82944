// Command sessioncall drives `sodactl sandbox mcp` (its arguments after
// --), or the same tools over Streamable HTTP (-url, -token: a soda-mcp@
// unit whose server is sodactl sandbox mcp), with the go-sdk client
// through a whole session: create with seed
// files, exec (python3, id -u), write, diff, reset, audit, close. It
// prints one line per step, "ok STEP ..." or "FAIL STEP ...", and exits 1
// on the first failure. test/e2e runs it in the systemd box as an
// unprivileged user, against sodad.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

func main() {
	url := flag.String("url", "", "Streamable HTTP endpoint (instead of a command)")
	token := flag.String("token", "", "bearer token for -url")
	egressURL := flag.String("egress", "", "also fetch this URL through the sandbox's proxy (curl -p) and find the attempt in the audit")
	hold := flag.Int("hold", 0, "instead: create N idle sandboxes, print \"ok held N\", wait for stdin to close, close them")
	limits := flag.Bool("limits", false, "also hit the memory limit (2 GiB allocated) and the task limit (500 forks) and find both in the audit")
	flag.Parse()
	args := flag.Args()
	if (len(args) == 0) == (*url == "") {
		fmt.Fprintln(os.Stderr, "usage: sessioncall -- sodactl sandbox mcp --profile NAME | sessioncall -url URL -token TOKEN")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var t mcp.Transport
	if *url != "" {
		t = &mcp.StreamableClientTransport{Endpoint: *url, HTTPClient: &http.Client{Transport: testkit.Bearer{Token: *token}}}
	} else {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = os.Stderr
		t = &mcp.CommandTransport{Command: cmd}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sessioncall", Version: "1"}, nil).Connect(ctx, t, nil)
	if err != nil {
		fail("connect", err.Error())
	}
	defer cs.Close()
	call := func(step, tool string, a map[string]any) map[string]any {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: a})
		if err != nil {
			fail(step, err.Error())
		}
		var r map[string]any
		data, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(data, &r)
		if res.IsError {
			fail(step, fmt.Sprint(r["error"]))
		}
		return r
	}
	exec := func(step, id, command string) string {
		r := call(step, "sandbox_exec", map[string]any{"sandbox_id": id, "command": command})
		return r["exec"].(map[string]any)["stdout"].(string)
	}
	if *hold > 0 {
		var ids []string
		for range *hold {
			r := call("create", "sandbox_create", map[string]any{"files": []any{map[string]any{"path": "a", "content": "x"}}})
			ids = append(ids, r["sandbox_id"].(string))
		}
		ok("held", fmt.Sprint(len(ids)))
		_, _ = io.Copy(io.Discard, os.Stdin)
		for _, id := range ids {
			call("close", "sandbox_close", map[string]any{"sandbox_id": id})
		}
		ok("closed", fmt.Sprint(len(ids)))
		return
	}
	r := call("create", "sandbox_create", map[string]any{"files": []any{map[string]any{"path": "app.py", "content": "print(6 * 7)\n"}}})
	id := r["sandbox_id"].(string)
	ok("create", id)
	if out := exec("python3", id, "python3 app.py"); out != "42\n" {
		fail("python3", out)
	}
	ok("python3", "42")
	uid := strings.TrimSpace(exec("uid", id, "id -u; pwd"))
	ok("uid", strings.ReplaceAll(uid, "\n", " "))
	call("write", "sandbox_write_files", map[string]any{"sandbox_id": id, "files": []any{map[string]any{"path": "app.py", "content": "print(1)\n"}}})
	d := call("diff", "sandbox_diff", map[string]any{"sandbox_id": id, "format": "unified"})
	uni := d["diff"].(map[string]any)["unified"].(string)
	if !strings.Contains(uni, "+print(1)") {
		fail("diff", uni)
	}
	ok("diff", "unified has +print(1)")
	call("reset", "sandbox_reset", map[string]any{"sandbox_id": id})
	if out := exec("after-reset", id, "python3 app.py"); out != "42\n" {
		fail("after-reset", out)
	}
	ok("reset", "back to the baseline")
	if *egressURL != "" {
		exec("egress", id, "env -u NO_PROXY -u no_proxy curl -s -o /dev/null -m 3 -p "+*egressURL+"; echo $?")
	}
	if *limits {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"sandbox_id": id,
			"command": "python3 -c 'x = bytearray(2 << 30)'; i=0; while [ $i -lt 500 ]; do sleep 3 & i=$((i+1)); done 2>/dev/null; wait"}})
		if err != nil {
			fail("limits", err.Error())
		}
		var r map[string]any
		data, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(data, &r)
		e, _ := r["exec"].(map[string]any)
		if e["memory_limit_hit"] != true || e["tasks_limit_hit"] != true {
			fail("limits", string(data))
		}
		ok("limits", "memory and task limits hit")
	}
	a := call("audit", "sandbox_audit", map[string]any{"sandbox_id": id})
	audit := a["audit"].(map[string]any)
	if *egressURL != "" {
		found := ""
		for _, r := range audit["records"].([]any) {
			if m := r.(map[string]any); m["kind"] == "egress" {
				found = fmt.Sprintf("%v %v", m["target"], m["decision"])
			}
		}
		if found == "" {
			fail("egress", "no egress record in the session's audit")
		}
		ok("egress", found)
	}
	ok("audit", fmt.Sprintf("%d records, journal %s", len(audit["records"].([]any)), audit["journal_match"]))
	call("close", "sandbox_close", map[string]any{"sandbox_id": id})
	ok("close", id)
}

func ok(step, detail string) { fmt.Printf("ok %s %s\n", step, detail) }

func fail(step, detail string) {
	fmt.Printf("FAIL %s %s\n", step, detail)
	os.Exit(1)
}
