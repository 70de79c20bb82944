package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// runColdstart measures, cfg.runs times, the time from spawning cfg.command
// to the first initialize answered at cfg.url.
func runColdstart(cfg *config) (result, error) {
	res := result{Mode: "coldstart", URL: cfg.url, Runs: cfg.runs, Sessions: 1}
	bodies, err := newRequestBodies(cfg)
	if err != nil {
		return res, err
	}
	body := bodies.initialize(1)
	var times []time.Duration
	for i := 0; i < cfg.runs; i++ {
		d, err := coldRun(cfg, body)
		if err != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("run %d: %v", i+1, err)
			}
			continue
		}
		times = append(times, d)
		res.InitMsAll = append(res.InitMsAll, ms(d))
	}
	res.OKCalls = len(times)
	sortDurations(times)
	res.InitMsP50 = ms(percentile(times, 50))
	if len(times) > 0 {
		res.InitMsMin = ms(times[0])
		res.InitMsMax = ms(times[len(times)-1])
	}
	return res, nil
}

// coldRun does one spawn -> first initialize measurement, then kills the
// spawned process group and waits for it.
func coldRun(cfg *config, body []byte) (time.Duration, error) {
	// A fresh client per run: no keep-alive connection may outlive a server.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()

	if ok, _, _ := tryInit(client, cfg, "", body, 500*time.Millisecond); ok {
		return 0, fmt.Errorf("%s already answers before spawning: port in use", cfg.url)
	}
	cmd := exec.Command(cfg.command[0], cfg.command[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// stdio to /dev/null: the bridge must not block on a full pipe.
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", cfg.command[0], err)
	}
	exited := make(chan error, 1)
	reaped := make(chan struct{})
	trackGroup(cmd.Process.Pid, reaped)
	go func() {
		err := cmd.Wait()
		close(reaped)
		exited <- err
	}()
	defer func() {
		stopGroup(cmd.Process.Pid, exited)
		untrackGroup(cmd.Process.Pid)
	}()

	deadline := t0.Add(cfg.maxWait)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err // for stopGroup
			return 0, fmt.Errorf("%s exited before answering: %v (last poll error: %v)", cfg.command[0], err, lastErr)
		default:
		}
		token := cfg.token
		if token == "" && cfg.tokenFile != "" {
			b, _ := os.ReadFile(cfg.tokenFile)
			token = strings.TrimSpace(string(b))
		}
		ok, sid, err := tryInit(client, cfg, token, body, 2*time.Second)
		if ok {
			d := time.Since(t0)
			if sid != "" {
				deleteSession(client, cfg, token, sid)
			}
			return d, nil
		}
		lastErr = err
		time.Sleep(cfg.poll)
	}
	return 0, fmt.Errorf("no initialize answer within %v (last error: %v)", cfg.maxWait, lastErr)
}

// tryInit POSTs initialize once; ok is true on HTTP 200 with a result that
// carries a protocolVersion.
func tryInit(client *http.Client, cfg *config, token string, body []byte, timeout time.Duration) (ok bool, sid string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url, bytes.NewReader(body))
	if err != nil {
		return false, "", fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, "", fmt.Errorf("POST initialize: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, "", fmt.Errorf("read initialize response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, "", fmt.Errorf("initialize: HTTP %d", resp.StatusCode)
	}
	if !bytes.Contains(data, []byte(`"result"`)) || !bytes.Contains(data, []byte("protocolVersion")) {
		return false, "", fmt.Errorf("initialize: no result in %q", truncate(string(data), 200))
	}
	return true, resp.Header.Get("Mcp-Session-Id"), nil
}

func deleteSession(client *http.Client, cfg *config, token, sid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, cfg.url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", sid)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if resp, err := client.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// stopGroup sends SIGTERM to the process group, SIGKILL after 3 s, waits for
// the leader, then SIGKILLs whatever is left in the group.
func stopGroup(pid int, exited chan error) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
