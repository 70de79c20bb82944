// Command validatecall validates files with a soda-validate worker over
// Streamable HTTP (go-sdk client): validatecall -url URL -token-file FILE
// PATH=CONTENT... It prints the verdict's JSON on one line and exits 0
// when the call returned a result (completed or not). test/e2e runs it in
// the systemd box.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/soda-project/soda/test/testkit"
)

func main() {
	url := flag.String("url", "", "the worker's /mcp URL")
	tokenFile := flag.String("token-file", "", "its token")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var files []any
	for _, a := range flag.Args() {
		p, c, _ := strings.Cut(a, "=")
		files = append(files, map[string]any{"path": p, "content": strings.ReplaceAll(c, `\n`, "\n")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "validatecall", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: *url, HTTPClient: &http.Client{Transport: testkit.Bearer{Token: strings.TrimSpace(string(tok))}}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "validate", Arguments: map[string]any{"files": files}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "validate:", err)
		os.Exit(1)
	}
	data, _ := json.Marshal(res.StructuredContent)
	fmt.Println(string(data))
}
