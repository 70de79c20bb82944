// Command sbxegress drives the run-time egress grants of a live sandbox
// through the sandbox engine as a library, as a supervisor would, for
// test/sandbox. Run as root where systemd is PID 1.
//
//	sbxegress PORT   starts a sandbox whose command sends one CONNECT to
//	                 127.0.0.1:PORT through the proxy per line it reads,
//	                 and asks three times: before any grant, after
//	                 SetEgress grants 127.0.0.1:PORT (private), after it is
//	                 revoked. Prints "before=LINE", "granted=LINE",
//	                 "revoked=LINE" (the proxy's status lines), one
//	                 "audit EVENT by=BY grants=..." line per grant or
//	                 revoke record and one "egress DECISION REASON" line
//	                 per egress record, then "exit=CODE".
package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soda-project/soda/internal/child"
	"github.com/soda-project/soda/internal/egress"
	"github.com/soda-project/soda/internal/sandbox"
)

func main() {
	if child.IsGate() {
		child.RunGate()
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sbxegress PORT")
		os.Exit(2)
	}
	port, err := strconv.ParseUint(os.Args[1], 10, 16)
	if err != nil || port == 0 {
		fmt.Fprintln(os.Stderr, "sbxegress: bad port", os.Args[1])
		os.Exit(2)
	}
	if err := run(uint16(port)); err != nil {
		fmt.Fprintln(os.Stderr, "sbxegress:", err)
		os.Exit(1)
	}
}

func run(port uint16) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var recs []sandbox.Record
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ecfg := sandbox.Detect()
	ecfg.Log, ecfg.Audit = log, func(r sandbox.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }
	initPath, err := sandbox.FindInit()
	if err != nil {
		return err
	}
	ecfg.InitPath = initPath
	engine, err := sandbox.New(ecfg)
	if err != nil {
		return err
	}
	defer engine.Close()

	home, err := os.MkdirTemp("", "sbxegress-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	script := fmt.Sprintf(`while read -r _; do
  if exec 3<>/dev/tcp/127.0.0.1/%d; then
    printf 'CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n' >&3
    IFS= read -r line <&3; echo "${line%%$'\r'}"; exec 3>&-
  else echo "no proxy"; fi
done`, egress.DefaultProxyPort, port)
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	sb, err := engine.Start(ctx, sandbox.Spec{Argv: []string{"bash", "-c", script}, Home: home, Stdin: inR, Stdout: outW, Stderr: os.Stderr})
	inR.Close()
	outW.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	out := bufio.NewScanner(outR)
	ask := func(label string) {
		_, _ = inW.WriteString("go\n")
		line := "(no reply)"
		if out.Scan() {
			line = out.Text()
		}
		fmt.Printf("%s=%s\n", label, line)
	}
	g := egress.Grant{Host: "127.0.0.1", Port: port, Private: true}
	ask("before")
	if err := sb.SetEgress(ctx, "sbxegress", []egress.Grant{g}, nil); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	ask("granted")
	if err := sb.SetEgress(ctx, "sbxegress", nil, []egress.Grant{g}); err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	ask("revoked")
	inW.Close()
	st, err := sb.Wait(ctx)
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range recs {
		switch r.Event {
		case "grant", "revoke":
			fmt.Printf("audit %s by=%s grants=%s\n", r.Event, r.By, strings.Join(r.Grants, ","))
		case "egress":
			if r.Egress.Reason != "connected" {
				fmt.Printf("egress %s %s\n", r.Egress.Decision, r.Egress.Reason)
			}
		}
	}
	fmt.Printf("exit=%d\n", st.Code)
	return nil
}
